package clocksync

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"time"
)

// BootIDPath is where Linux publishes the random id of the current boot.
const BootIDPath = "/proc/sys/kernel/random/boot_id"

// ReadBootID returns the id of the current boot from BootIDPath, so that
// monotonic times can be told apart from those of another boot.
func ReadBootID() (string, error) { return readBootID(BootIDPath) }

func readBootID(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read boot id: %w", err)
	}
	id := strings.TrimSpace(string(b))
	if id == "" || len(id) > 64 {
		return "", fmt.Errorf("read boot id: %s holds %d bytes, want a short non-empty id", path, len(id))
	}
	return id, nil
}

// RandomBootID returns a fresh id for a process that cannot read its boot's
// id. Monotonic times stamped under it are only ever matched within the
// same process, so nothing is re-timed across a restart it cannot prove
// happened in the same boot.
func RandomBootID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return "proc-" + hex.EncodeToString(b[:])
}

// monoFallbackStart anchors MonoNow on platforms without a boot clock. It
// is set once at program start and never changed.
var monoFallbackStart = time.Now()
