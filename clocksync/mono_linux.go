//go:build linux

package clocksync

import (
	"time"

	"golang.org/x/sys/unix"
)

// MonoNow returns the time since boot from CLOCK_BOOTTIME, which never
// steps and keeps counting while the device is suspended, falling back to
// CLOCK_MONOTONIC and then to process-relative time.
func MonoNow() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err == nil {
		return time.Duration(ts.Nano())
	}
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err == nil {
		return time.Duration(ts.Nano())
	}
	return time.Since(monoFallbackStart)
}
