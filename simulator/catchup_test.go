package simulator

import (
	"context"
	"math"
	"testing"
	"time"
)

// TestCatchupAgainstHub preloads a minute of history into a few devices'
// buffers, as if they had been offline, and runs them against an
// in-process hub: the report's catch-up figures count exactly the
// preloaded events, all acknowledged, at a rate consistent with the time
// they took, and the hub's windows match the truth.
func TestCatchupAgainstHub(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	srv := startHub(t)
	sc := Scenario{
		Name: "catchup-test", Devices: 4, Duration: 2 * time.Second, Resolution: time.Second,
		BoundaryGuard: 100 * time.Millisecond, DrainTimeout: 30 * time.Second,
		Classes: []DeviceClass{{Name: "returning", Preload: time.Minute,
			Metrics: []MetricSpec{{Name: "temp", Rate: 10, Min: 15, Max: 25}},
			Clock:   ClockSpec{DriftPPM: 20, WaitSync: 5 * time.Second}}},
		Uplink: UplinkTuning{MaxBatchEvents: 200, BackoffMin: 50 * time.Millisecond, BackoffMax: 500 * time.Millisecond, AckTimeout: 5 * time.Second},
		Verify: VerifySpec{Windows: []string{"tumbling:1s", "tumbling:1m0s"}, TimeSampleEvery: 1},
	}
	f := newTestFleet(t, srv, sc, nil)
	// Preloaded events have true times before the run's start, live ones
	// after it: those before this moment are surely preloaded, those
	// after it plus a margin surely not.
	before := time.Now()
	rep, err := f.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Phase != "drained" || rep.Acked != rep.Appended {
		t.Fatalf("phase %s appended %d acked %d: want drained, all acked", rep.Phase, rep.Appended, rep.Acked)
	}
	truth := f.Truth()
	var lo, hi uint64
	for _, d := range truth.Devices {
		if uint64(len(d.Samples)) != d.Appended {
			t.Fatalf("device %s: %d samples of %d events: want every event sampled", d.Device, len(d.Samples), d.Appended)
		}
		for _, s := range d.Samples {
			if s.TrueNs < before.UnixNano() {
				lo++
			}
			if s.TrueNs < before.Add(20*time.Millisecond).UnixNano() {
				hi++
			}
		}
	}
	c := rep.Catchup
	if c == nil {
		t.Fatalf("report %+v: no catch-up figures", rep)
	}
	t.Logf("catch-up %+v, preloaded %d..%d of %d events", *c, lo, hi, truth.Events())
	if lo < uint64(sc.Devices)*400 || c.Events < lo || c.Events > hi {
		t.Errorf("catch-up counts %d preloaded events: want %d..%d (and at least 400 a device: 10/s for a minute, less those near a boundary)", c.Events, lo, hi)
	}
	if c.Acked != c.Events || c.Seconds <= 0 || c.Seconds > rep.Elapsed || c.Rate <= 0 ||
		math.Abs(c.Rate-float64(c.Events)/c.Seconds) > 1e-6*c.Rate {
		t.Errorf("catch-up %+v after %.1fs: want all acked, in 0..elapsed seconds, at events/seconds", *c, rep.Elapsed)
	}
	vr, err := Verify(context.Background(), truth, VerifyOptions{HubURL: "http://" + srv.HTTPAddr()})
	if err != nil {
		t.Fatal(err)
	}
	if !vr.OK || vr.Applied != vr.Events || len(vr.Windows) != 2 {
		t.Fatalf("verify: ok %v, applied %d of %d, failures %q", vr.OK, vr.Applied, vr.Events, vr.Failures)
	}
	for _, w := range vr.Windows {
		// A minute of history: at least 50 one-second windows a device.
		if !w.Available || w.Match == 0 || w.UnverifiableDevices != 0 || (w.Window == "tumbling:1s" && w.Match < 50*sc.Devices) {
			t.Errorf("windows %s %s: %+v: want all devices' windows checked and matching", w.Window, w.Metric, w)
		}
	}
}
