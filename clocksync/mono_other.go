//go:build !linux

package clocksync

import "time"

// MonoNow returns monotonic time since the process started: this platform
// offers no boot clock through golang.org/x/sys. Pair it with a
// RandomBootID so that nothing is re-timed across a restart.
func MonoNow() time.Duration { return time.Since(monoFallbackStart) }
