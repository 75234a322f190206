package clockest

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// dcFeed sends n batches of a device whose clock is offset behind the hub
// (offset = hub - device), one every interval of hub time, each delayed by
// at least minDelay plus a random extra up to jitter. The jitter comes
// from a fixed seed: with a fresh one per run, the least of 40 jitters
// now and then stayed high enough to put the estimate outside its bound
// (TestDeviceClocksEstimate's slow link failed so in CI once).
func dcFeed(c *DeviceClocks, dev string, start time.Time, n int, interval, offset, minDelay, jitter time.Duration) time.Time {
	rng := rand.New(rand.NewPCG(uint64(n), uint64(offset)))
	at := start
	for range n {
		delay := minDelay
		if jitter > 0 {
			delay += time.Duration(rng.Int64N(int64(jitter)))
		}
		send := at.Add(-offset).Add(-delay) // device clock at publish
		c.Observe(dev, send, at)
		at = at.Add(interval)
	}
	return at
}

func newDC(t *testing.T, mutate func(*DeviceClocksOptions)) *DeviceClocks {
	t.Helper()
	var o DeviceClocksOptions
	if mutate != nil {
		mutate(&o)
	}
	c, err := NewDeviceClocks(o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestDeviceClocksEstimate(t *testing.T) {
	start := time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name             string
		offset, minDelay time.Duration
		jitter           time.Duration
	}{
		{"an hour behind, fast link", time.Hour, 5 * time.Millisecond, 50 * time.Millisecond},
		{"minutes ahead, LAN", -7 * time.Minute, 300 * time.Microsecond, 2 * time.Millisecond},
		// Min delay plus the least of 40 jitters stays under MaxOneWayDelay
		// (500 ms) except with probability 0.7^40.
		{"ahead, slow link", -3 * time.Minute, 200 * time.Millisecond, time.Second},
		// A path whose every batch takes 450 ms one way (a satellite hop,
		// a broker queue): the point is off by that much, the bound still
		// holds the truth.
		{"large asymmetric delay", 90 * time.Second, 450 * time.Millisecond, 0},
		{"exact, no delay", 0, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newDC(t, nil)
			if _, _, ok := c.Estimate("d"); ok {
				t.Fatal("estimate before any batch")
			}
			dcFeed(c, "d", start, 40, 10*time.Second, tc.offset, tc.minDelay, tc.jitter)
			off, unc, ok := c.Estimate("d")
			if !ok {
				t.Fatal("no estimate")
			}
			// The point is the fastest batch's server - send: the true
			// offset plus its one-way delay, never below the truth.
			if e := off - tc.offset; e < tc.minDelay || e > tc.minDelay+tc.jitter {
				t.Errorf("offset %v, want the true %v plus the least delay (%v..%v)", off, tc.offset, tc.minDelay, tc.minDelay+tc.jitter)
			}
			if err := (off - tc.offset).Abs(); err > unc {
				t.Errorf("offset %v ± %v, true %v", off, unc, tc.offset)
			}
			// The bound is the delay bound plus the drift over the best
			// observation's age (at most 390 s here, 39 ms at 100 ppm).
			if unc < 500*time.Millisecond || unc > 540*time.Millisecond {
				t.Errorf("uncertainty %v, want 500 ms plus drift", unc)
			}
		})
	}
}

// TestDeviceClocksPointAndBound: with known delays the estimate is exactly
// the least server - send, and its uncertainty covers the whole interval
// [min - MaxOneWayDelay, min] the true offset can lie in.
func TestDeviceClocksPointAndBound(t *testing.T) {
	c := newDC(t, func(o *DeviceClocksOptions) { o.MaxOneWayDelay = 200 * time.Millisecond })
	at := time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)
	offset := -2 * time.Minute // device 2 min ahead
	for _, delay := range []time.Duration{40, 3, 17, 9} {
		delay *= time.Millisecond
		c.Observe("d", at.Add(-offset).Add(-delay), at)
		at = at.Add(time.Second)
	}
	// The fastest batch is 2 s older than the latest: 100 ppm of drift
	// over 2 s widens the bound by 200 µs.
	off, unc, ok := c.Estimate("d")
	if want := 200*time.Millisecond + 200*time.Microsecond; !ok || off != offset+3*time.Millisecond || unc != want {
		t.Fatalf("estimate %v ± %v (ok %v), want %v ± %v", off, unc, ok, offset+3*time.Millisecond, want)
	}
	// Both ends of the bound: a true offset anywhere in [min - 200ms, min]
	// is covered.
	for _, truth := range []time.Duration{off - 200*time.Millisecond, off} {
		if (off - truth).Abs() > unc {
			t.Errorf("true offset %v outside %v ± %v", truth, off, unc)
		}
	}
}

func TestDeviceClocksDriftWidens(t *testing.T) {
	start := time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)
	c := newDC(t, nil)
	// One fast batch, then slow ones for 20 minutes: the old minimum still
	// wins but its bound has widened by the drift allowance.
	at := dcFeed(c, "d", start, 1, time.Minute, time.Second, 0, 0)
	dcFeed(c, "d", at, 15, time.Minute, time.Second, 2*time.Second, 0)
	off, unc, _ := c.Estimate("d")
	if want := 500*time.Millisecond + 90*time.Millisecond; unc < want {
		t.Errorf("uncertainty %v, want at least %v (the delay bound + 100 ppm of 15 min)", unc, want)
	}
	if err := (off - time.Second).Abs(); err > unc {
		t.Errorf("offset %v ± %v, true 1s", off, unc)
	}
}

func TestDeviceClocksStep(t *testing.T) {
	start := time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)
	c := newDC(t, nil)
	at := dcFeed(c, "d", start, 10, 10*time.Second, time.Second, 10*time.Millisecond, 0)

	// A burst of batches a broker held for minutes is not a step.
	burst := at
	for i := range 5 {
		c.Observe("d", burst.Add(-time.Second-time.Duration(5-i)*time.Minute), burst)
		burst = burst.Add(time.Millisecond)
	}
	if off, _, _ := c.Estimate("d"); (off - time.Second).Abs() > 300*time.Millisecond {
		t.Fatalf("offset %v after a queued burst, want ~1s", off)
	}

	// The device clock is set back 30 s: after StepConfirm batches over
	// StepSpan, the estimate follows.
	dcFeed(c, "d", burst, 8, 10*time.Second, 31*time.Second, 10*time.Millisecond, 0)
	off, unc, _ := c.Estimate("d")
	if err := (off - 31*time.Second).Abs(); err > unc {
		t.Errorf("offset %v ± %v after a step, true 31s", off, unc)
	}

	// Set forward: the minimum follows at once.
	c.Observe("d", burst.Add(2*time.Minute), burst.Add(2*time.Minute))
	if off, unc, _ := c.Estimate("d"); off.Abs() > unc {
		t.Errorf("offset %v ± %v after a forward step, true 0", off, unc)
	}
}

func TestDeviceClocksBounded(t *testing.T) {
	start := time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)
	c := newDC(t, func(o *DeviceClocksOptions) { o.MaxDevices = 10; o.Window = 4; o.StepConfirm = 2 })
	for i := range 25 {
		dcFeed(c, fmt.Sprint("d", i), start.Add(time.Duration(i)*time.Second), 9, time.Second, 0, 0, 0)
	}
	if c.Len() != 10 {
		t.Errorf("tracking %d devices, bound 10", c.Len())
	}
	if _, _, ok := c.Estimate("d0"); ok {
		t.Error("the stalest device was not evicted")
	}
	c.mu.Lock()
	for id, dc := range c.devices {
		if len(dc.obs) != 4 || cap(dc.obs) != 4 {
			t.Errorf("%s holds %d observations (cap %d), window 4", id, len(dc.obs), cap(dc.obs))
		}
	}
	c.mu.Unlock()
	c.Forget("d24")
	if _, _, ok := c.Estimate("d24"); ok || c.Len() != 9 {
		t.Error("Forget did not forget")
	}
}

func TestDeviceClocksOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		field  string
		mutate func(*DeviceClocksOptions)
	}{
		{"Window", func(o *DeviceClocksOptions) { o.Window = 1000 }},
		{"MaxAge", func(o *DeviceClocksOptions) { o.MaxAge = -1 }},
		{"MaxOneWayDelay", func(o *DeviceClocksOptions) { o.MaxOneWayDelay = -1 }},
		{"DriftPPM", func(o *DeviceClocksOptions) { o.DriftPPM = -1 }},
		{"StepConfirm", func(o *DeviceClocksOptions) { o.StepConfirm = 100 }},
		{"MaxDevices", func(o *DeviceClocksOptions) { o.MaxDevices = -1 }},
	} {
		t.Run(tc.field, func(t *testing.T) {
			var o DeviceClocksOptions
			tc.mutate(&o)
			_, err := NewDeviceClocks(o)
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("error %v does not name %s", err, tc.field)
			}
		})
	}
}
