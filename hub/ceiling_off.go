//go:build !ceiling

package hub

// Without the build tag ceiling the ceiling instruments are off, and
// constants, so that their branches compile away (see ceiling.go).
const (
	ceilingStore    = ""
	ceilingNoDecode = false
)
