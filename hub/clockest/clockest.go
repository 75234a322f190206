package clockest

import (
	"fmt"
	"math"
	"sync"
	"time"
)

// DeviceClocksOptions configure DeviceClocks. Zero values take the
// defaults noted per field.
type DeviceClocksOptions struct {
	// Window is how many recent batches per device are kept. Default 16;
	// at most 256.
	Window int
	// MaxAge drops observations older than this (hub time) from the
	// minimum. Default 1 h.
	MaxAge time.Duration
	// MaxOneWayDelay bounds the smallest one-way delay (agent publish to
	// hub arrival) among a device's recent batches: the true offset lies
	// within it below the minimum of server_time - send_time. Default
	// 500 ms.
	MaxOneWayDelay time.Duration
	// DriftPPM bounds device clock drift, parts per million: an
	// observation's bound widens at this rate with its age. Default 100.
	DriftPPM float64
	// StepThreshold is how far above the current estimate batches must
	// arrive to count as a device clock step backwards. Default 2 s.
	StepThreshold time.Duration
	// StepConfirm is how many batches in a row must sit above it, and
	// StepSpan how much hub time they must span (so a burst of batches a
	// broker queued is not taken for a step), before the older
	// observations are dropped. Defaults 3 and 1 min.
	StepConfirm int
	StepSpan    time.Duration
	// MaxDevices bounds the devices tracked; beyond it the device seen
	// longest ago is forgotten. Default 100,000.
	MaxDevices int
}

// EnsureDefaults fills zero fields with their defaults.
func (o *DeviceClocksOptions) EnsureDefaults() {
	if o.Window == 0 {
		o.Window = 16
	}
	if o.MaxAge == 0 {
		o.MaxAge = time.Hour
	}
	if o.MaxOneWayDelay == 0 {
		o.MaxOneWayDelay = 500 * time.Millisecond
	}
	if o.DriftPPM == 0 {
		o.DriftPPM = 100
	}
	if o.StepThreshold == 0 {
		o.StepThreshold = 2 * time.Second
	}
	if o.StepConfirm == 0 {
		o.StepConfirm = 3
	}
	if o.StepSpan == 0 {
		o.StepSpan = time.Minute
	}
	if o.MaxDevices == 0 {
		o.MaxDevices = 100_000
	}
}

// Validate names the first field that is out of range.
func (o *DeviceClocksOptions) Validate() error {
	switch {
	case o.Window < 1 || o.Window > 256:
		return fmt.Errorf("hub: device clocks Window %d: want 1..256", o.Window)
	case o.MaxAge <= 0:
		return fmt.Errorf("hub: device clocks MaxAge %v: want positive", o.MaxAge)
	case o.MaxOneWayDelay <= 0:
		return fmt.Errorf("hub: device clocks MaxOneWayDelay %v: want positive", o.MaxOneWayDelay)
	case o.DriftPPM < 0 || o.DriftPPM > 10_000:
		return fmt.Errorf("hub: device clocks DriftPPM %v: want 0..10000", o.DriftPPM)
	case o.StepThreshold <= 0:
		return fmt.Errorf("hub: device clocks StepThreshold %v: want positive", o.StepThreshold)
	case o.StepConfirm < 1 || o.StepConfirm > o.Window:
		return fmt.Errorf("hub: device clocks StepConfirm %d: want 1..Window (%d)", o.StepConfirm, o.Window)
	case o.StepSpan < 0:
		return fmt.Errorf("hub: device clocks StepSpan %v: want non-negative", o.StepSpan)
	case o.MaxDevices < 1:
		return fmt.Errorf("hub: device clocks MaxDevices %d: want at least 1", o.MaxDevices)
	}
	return nil
}

// DeviceClocks is the hub's own estimate of each device's clock offset
// (hub time minus device time), from server_time - send_time of its recent
// batches: that difference is the offset plus the one-way delay, so its
// minimum over recent batches bounds the offset from above, and
// MaxOneWayDelay bounds it from below. That minimum is the estimate (see
// Estimate). The hub uses it for events that
// the agent could not correct. It satisfies ClockEstimator and is safe for
// concurrent use; each device costs a fixed few hundred bytes.
type DeviceClocks struct {
	opts DeviceClocksOptions
	rho  float64 // drift bound, dimensionless

	mu      sync.Mutex
	devices map[string]*deviceClock
}

// deviceClock is a ring of a device's recent observations.
type deviceClock struct {
	obs      []clockObs // ring, len <= Window
	next     int
	lastSeen int64 // hub Unix ns of the latest observation
	high     int   // consecutive observations above the estimate
	highFrom int64 // hub time of the first of them
	highMin  int64 // their d range
	highMax  int64
}

// clockObs is one batch: d = server_time - send_time, at = server_time.
type clockObs struct{ d, at int64 }

// NewDeviceClocks validates opts and returns an empty estimator.
func NewDeviceClocks(opts DeviceClocksOptions) (*DeviceClocks, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	return &DeviceClocks{opts: opts, rho: opts.DriftPPM * 1e-6, devices: make(map[string]*deviceClock)}, nil
}

// Observe records one batch of device: its send time (device clock) and
// its arrival (hub clock).
func (c *DeviceClocks) Observe(device string, sendTime, serverTime time.Time) {
	o := clockObs{d: serverTime.UnixNano() - sendTime.UnixNano(), at: serverTime.UnixNano()}
	c.mu.Lock()
	defer c.mu.Unlock()
	dc := c.devices[device]
	if dc == nil {
		if len(c.devices) >= c.opts.MaxDevices {
			c.evictStalest()
		}
		dc = &deviceClock{obs: make([]clockObs, 0, c.opts.Window)}
		c.devices[device] = dc
	}
	dc.lastSeen = max(dc.lastSeen, o.at)
	if ub, _, _, ok := c.bound(dc, o.at); ok && o.d > ub+int64(c.opts.StepThreshold) {
		c.noteHigh(dc, o)
	} else {
		dc.high = 0
	}
	dc.add(o, c.opts.Window)
}

// noteHigh counts an observation above the estimate and, once enough of
// them agree over enough time, takes them as a step of the device clock
// and drops what came before.
func (c *DeviceClocks) noteHigh(dc *deviceClock, o clockObs) {
	if dc.high == 0 {
		dc.highFrom, dc.highMin, dc.highMax = o.at, o.d, o.d
	}
	dc.high++
	dc.highMin, dc.highMax = min(dc.highMin, o.d), max(dc.highMax, o.d)
	if dc.highMax-dc.highMin > int64(c.opts.StepThreshold) {
		dc.high, dc.highFrom, dc.highMin, dc.highMax = 1, o.at, o.d, o.d
	}
	if dc.high >= c.opts.StepConfirm && o.at-dc.highFrom >= int64(c.opts.StepSpan) {
		kept := dc.obs[:0]
		for _, x := range dc.ordered() {
			if x.at >= dc.highFrom {
				kept = append(kept, x)
			}
		}
		dc.obs, dc.next, dc.high = kept, len(kept)%c.opts.Window, 0
	}
}

func (dc *deviceClock) add(o clockObs, window int) {
	if len(dc.obs) < window {
		dc.obs = append(dc.obs, o)
		dc.next = len(dc.obs) % window
		return
	}
	dc.obs[dc.next] = o
	dc.next = (dc.next + 1) % window
}

// ordered returns the ring oldest first (a copy).
func (dc *deviceClock) ordered() []clockObs {
	out := make([]clockObs, 0, len(dc.obs))
	if len(dc.obs) < cap(dc.obs) {
		return append(out, dc.obs...)
	}
	out = append(out, dc.obs[dc.next:]...)
	return append(out, dc.obs[:dc.next]...)
}

// bound returns the least upper bound ub on the offset at hub time now
// over the recent observations, the observation d that gives it, and d's
// age.
func (c *DeviceClocks) bound(dc *deviceClock, now int64) (ub, d, age int64, ok bool) {
	best := math.Inf(1)
	for _, o := range dc.obs {
		a := now - o.at
		if a > int64(c.opts.MaxAge) {
			continue
		}
		a = max(a, 0)
		if v := float64(o.d) + c.rho*float64(a); v < best {
			best, ub, d, age, ok = v, int64(math.Ceil(v)), o.d, a, true
		}
	}
	return ub, d, age, ok
}

// Estimate returns the offset (hub time minus device time, to add to a
// device time) at the device's latest batch, its uncertainty, and whether
// there is a recent enough observation.
//
// The offset is the observation that bounds it best, server_time -
// send_time of the fastest recent batch: the true offset lies in
// [d - MaxOneWayDelay, d] then, widened by the drift bound over d's age.
// That minimum-delay sample is the point estimate (as NTP's clock filter
// picks its minimum-delay sample): on a LAN the one-way delay is a
// millisecond or less, so a right clock is moved by that much, not by half
// the delay bound. The uncertainty, MaxOneWayDelay plus the drift term,
// is the half-width of a symmetric interval that covers the asymmetric
// bound.
func (c *DeviceClocks) Estimate(device string) (offset, uncertainty time.Duration, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	dc := c.devices[device]
	if dc == nil {
		return 0, 0, false
	}
	_, d, age, ok := c.bound(dc, dc.lastSeen)
	if !ok {
		return 0, 0, false
	}
	return time.Duration(d), c.opts.MaxOneWayDelay + time.Duration(math.Ceil(c.rho*float64(age))), true
}

// Forget drops a device's state (e.g. when it is deregistered).
func (c *DeviceClocks) Forget(device string) {
	c.mu.Lock()
	delete(c.devices, device)
	c.mu.Unlock()
}

// Len returns the number of devices tracked.
func (c *DeviceClocks) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.devices)
}

// evictStalest forgets the device seen longest ago. It scans every device,
// which is acceptable because it runs only when the bound is reached.
func (c *DeviceClocks) evictStalest() {
	var victim string
	oldest := int64(math.MaxInt64)
	for id, dc := range c.devices {
		if dc.lastSeen < oldest {
			victim, oldest = id, dc.lastSeen
		}
	}
	delete(c.devices, victim)
}
