//go:build ceiling

package hub

import "os"

// The ceiling instruments' switches, read once at start in a build with
// the tag ceiling (see ceiling.go).
var (
	ceilingStore    = os.Getenv("HUB_CEILING_STORE")
	ceilingNoDecode = os.Getenv("HUB_CEILING_NODECODE") == "1"
)
