package simulator

import (
	"math"
	"sync"
	"time"
)

// DeviceClock is a simulated device's clocks as functions of the true
// time: one oscillator, off by DriftPPM, drives both the monotonic clock
// (since boot) and the wall clock; the wall clock can also be stepped,
// and a power loss reboots the device with the wall clock reset to 1970
// (a board without an RTC battery). Safe for concurrent use.
type DeviceClock struct {
	now   func() time.Time // the true time
	drift float64          // dimensionless (ppm * 1e-6)

	mu       sync.Mutex
	bootTrue time.Time // true time at boot
	wallBoot int64     // device wall clock at boot, Unix ns
	step     int64     // sum of wall steps this boot, ns
	boot     int       // boot counter, for boot ids
}

// NewDeviceClock returns a clock that booted at now() with its wall clock
// offset from the true time (device wall minus true) and an oscillator
// driftPPM fast.
func NewDeviceClock(now func() time.Time, offset time.Duration, driftPPM float64) *DeviceClock {
	t := now()
	return &DeviceClock{now: now, drift: driftPPM * 1e-6, bootTrue: t, wallBoot: t.UnixNano() + int64(offset)}
}

// Mono is the monotonic clock since boot: true time since boot times the
// oscillator's rate.
func (c *DeviceClock) Mono() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.monoLocked(c.now())
}

func (c *DeviceClock) monoLocked(t time.Time) time.Duration {
	el := t.Sub(c.bootTrue)
	return el + time.Duration(math.Round(float64(el)*c.drift))
}

// Wall is the device wall clock.
func (c *DeviceClock) Wall() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Unix(0, c.wallBoot+int64(c.monoLocked(c.now()))+c.step)
}

// Read returns the true time with the monotonic and wall clocks at that
// instant, read together.
func (c *DeviceClock) Read() (trueNow time.Time, mono time.Duration, wall time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.now()
	m := c.monoLocked(t)
	return t, m, time.Unix(0, c.wallBoot+int64(m)+c.step)
}

// Offset is the error of the wall clock now: wall minus true time.
func (c *DeviceClock) Offset() time.Duration {
	t, _, w := c.Read()
	return w.Sub(t)
}

// WallAt is what the wall clock read (or would have read, before boot, on
// the same oscillator) at true time t.
func (c *DeviceClock) WallAt(t time.Time) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Unix(0, c.wallBoot+int64(c.monoLocked(t))+c.step)
}

// Step moves the wall clock by d (the monotonic clock is unaffected).
func (c *DeviceClock) Step(d time.Duration) {
	c.mu.Lock()
	c.step += int64(d)
	c.mu.Unlock()
}

// PowerLoss reboots the device now: the monotonic clock restarts from
// zero and the wall clock from the Unix epoch (1970). It returns the new
// boot number.
func (c *DeviceClock) PowerLoss() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.bootTrue = c.now()
	c.wallBoot, c.step = 0, 0
	c.boot++
	return c.boot
}

// Boot is the number of power losses so far (0 for the first boot).
func (c *DeviceClock) Boot() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.boot
}
