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
		// Min delay plus the least of 40 jitters stays under MaxOneWayDelay
		// (500 ms) except with probability 0.7^40.
		{"ahead, slow link", -3 * time.Minute, 200 * time.Millisecond, time.Second},
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
			if err := (off - tc.offset).Abs(); err > unc {
				t.Errorf("offset %v ± %v, true %v", off, unc, tc.offset)
			}
			if unc > 300*time.Millisecond {
				t.Errorf("uncertainty %v", unc)
			}
		})
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
	if want := 250*time.Millisecond + 90*time.Millisecond; unc < want {
		t.Errorf("uncertainty %v, want at least %v (half the delay bound + 100 ppm of 15 min)", unc, want)
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
