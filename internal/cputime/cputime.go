// Package cputime reads the CPU time this process has used, for benchmarks
// that report CPU per event beside wall-clock rates (the machine is shared,
// so wall time alone says little).
package cputime

import (
	"syscall"
	"time"
)

// Self is the CPU time (user and system) this process has used so far,
// every goroutine included (background work such as Badger's compactions
// too), or 0 if the system cannot say.
func Self() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
