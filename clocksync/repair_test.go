package clocksync

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"edgeflow/wire/wirepb"
)

func TestRepair(t *testing.T) {
	// A device booted with its RTC reset to 1970, offline: events are
	// stamped untrusted. Then NTP answers.
	dev := newSimClock(time.Unix(86400, 0))
	ref := newRef(dev, day0.Sub(time.Unix(86400, 0)), 30)
	srv := startNTP(t, ref.Now, 0)
	srv.mode.Store(int32(modeDrop))
	c := newTestClock(t, dev, []string{srv.addr}, func(o *Options) { o.QueryTimeout = 50 * time.Millisecond })

	var early wirepb.Event
	c.StampEvent(&early)
	if early.Method != wirepb.TimeMethod_TIME_METHOD_UNTRUSTED || early.OffsetNs != 0 || early.BootId != testBoot {
		t.Fatalf("event before sync: %+v", &early)
	}
	if c.RepairEvent(&early) {
		t.Fatal("repaired with no estimate")
	}
	dev.Advance(20 * time.Minute)
	if err := c.Poll(context.Background()); err == nil {
		t.Fatal("Poll succeeded against a dead server")
	}

	srv.mode.Store(int32(modeNormal))
	pollN(t, c, dev, 20, 64*time.Second)

	// Same boot: re-timed through its monotonic time.
	if !c.RepairEvent(&early) {
		t.Fatal("RepairEvent = false for an event of this boot")
	}
	if early.Method != wirepb.TimeMethod_TIME_METHOD_REPAIRED {
		t.Errorf("method %v, want REPAIRED", early.Method)
	}
	truth := ref.at(time.Duration(early.MonoNs))
	got := early.DeviceTimeNs + early.OffsetNs
	if err := time.Duration(got - truth).Abs(); err > time.Duration(early.UncertaintyNs) {
		t.Errorf("repaired time %v off, uncertainty %v", err, time.Duration(early.UncertaintyNs))
	}
	// 20 minutes before the first sample at 15 ppm plus change: well under a second.
	if u := time.Duration(early.UncertaintyNs); u > 100*time.Millisecond {
		t.Errorf("repair uncertainty %v", u)
	}

	// Another boot: never re-timed, stays flagged.
	other := wirepb.Event{DeviceTimeNs: early.DeviceTimeNs, MonoNs: early.MonoNs, BootId: "another-boot"}
	if c.RepairEvent(&other) || other.Method != wirepb.TimeMethod_TIME_METHOD_UNTRUSTED || other.OffsetNs != 0 {
		t.Errorf("event of another boot: %+v", &other)
	}
	// A monotonic time from this boot's future is impossible.
	future := wirepb.Event{DeviceTimeNs: early.DeviceTimeNs, MonoNs: int64(dev.Mono() + time.Hour), BootId: testBoot}
	if c.RepairEvent(&future) {
		t.Error("repaired an event from the future")
	}

	// After sync, events are corrected at capture and left alone later.
	var late wirepb.Event
	c.StampEvent(&late)
	if late.Method != wirepb.TimeMethod_TIME_METHOD_NTP {
		t.Fatalf("event after sync: method %v", late.Method)
	}
	if c.RepairEvent(&late) {
		t.Error("RepairEvent touched an event corrected at capture")
	}
	if err := time.Duration(late.DeviceTimeNs + late.OffsetNs - ref.at(time.Duration(late.MonoNs))).Abs(); err > time.Duration(late.UncertaintyNs) {
		t.Errorf("stamped time %v off, uncertainty %v", err, time.Duration(late.UncertaintyNs))
	}
}

func TestRepairTooLongAgo(t *testing.T) {
	dev := newSimClock(day0)
	ref := newRef(dev, time.Minute, 0)
	srv := startNTP(t, ref.Now, 0)
	c := newTestClock(t, dev, []string{srv.addr}, func(o *Options) { o.MaxUncertainty = time.Second })
	st := c.Stamp()
	dev.Advance(30 * 24 * time.Hour) // a month offline before the first sync
	pollN(t, c, dev, 20, 64*time.Second)
	cr := c.Correct(st.DeviceTime, st.Mono, st.BootID)
	if cr.Method != wirepb.TimeMethod_TIME_METHOD_UNTRUSTED || !cr.Time.Equal(st.DeviceTime) {
		t.Errorf("a month back at 15 ppm is 39 s of uncertainty; got %+v", cr)
	}
}

func TestReadBootID(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "boot_id")
	if err := os.WriteFile(p, []byte("4f6c2b1e-0000-4000-8000-123456789abc\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	id, err := readBootID(p)
	if err != nil || id != "4f6c2b1e-0000-4000-8000-123456789abc" {
		t.Errorf("readBootID = %q, %v", id, err)
	}
	if _, err := readBootID(filepath.Join(dir, "missing")); err == nil {
		t.Error("no error for a missing file")
	}
	if a, b := RandomBootID(), RandomBootID(); a == b || len(a) != 37 {
		t.Errorf("RandomBootID = %q, %q", a, b)
	}
	m1 := MonoNow()
	m2 := MonoNow()
	if m1 <= 0 || m2 < m1 {
		t.Errorf("MonoNow went %v then %v", m1, m2)
	}
}

// TestSettle: a correction the estimate cannot tell from zero is not
// applied, and the interval then still holds the truth.
func TestSettle(t *testing.T) {
	dt := time.Date(2025, 6, 1, 5, 0, 0, 0, time.UTC) // on a window boundary
	for _, tc := range []struct {
		name        string
		offset, unc time.Duration
		wantOff     time.Duration
		wantUnc     time.Duration
	}{
		{"noise below the uncertainty", 220 * time.Microsecond, 400 * time.Microsecond, 0, 620 * time.Microsecond},
		{"negative noise", -400 * time.Microsecond, 400 * time.Microsecond, 0, 800 * time.Microsecond},
		{"a real offset", 3 * time.Millisecond, 400 * time.Microsecond, 3 * time.Millisecond, 400 * time.Microsecond},
		{"minutes off", -7 * time.Minute, time.Millisecond, -7 * time.Minute, time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := Correction{Time: dt.Add(tc.offset), Offset: tc.offset, Uncertainty: tc.unc, Method: wirepb.TimeMethod_TIME_METHOD_HUB_SYNC}
			got := settle(in, dt)
			if got.Offset != tc.wantOff || got.Uncertainty != tc.wantUnc || !got.Time.Equal(dt.Add(tc.wantOff)) || got.Method != in.Method {
				t.Errorf("settle = %+v, want offset %v ± %v", got, tc.wantOff, tc.wantUnc)
			}
			// Wherever the truth lies within the estimate's interval, the
			// settled interval holds it too.
			for _, truth := range []time.Duration{tc.offset - tc.unc, tc.offset + tc.unc} {
				if (got.Offset - truth).Abs() > got.Uncertainty {
					t.Errorf("true offset %v outside %v ± %v", truth, got.Offset, got.Uncertainty)
				}
			}
		})
	}
}

// TestRightClockKeepsItsTimes: a device whose clock is right, synced over
// the hub's time service, stamps and repairs events at their own device
// time; a device 40 ms off is corrected.
func TestRightClockKeepsItsTimes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		offset  time.Duration
		applied bool
	}{
		{"right", 0, false},
		{"40 ms behind", 40 * time.Millisecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dev := newSimClock(day0)
			ref := newRef(dev, tc.offset, 0)
			c := newTestClock(t, dev, nil, func(o *Options) { o.Hub = &fakeHub{ref: ref, delay: 200 * time.Microsecond} })
			var early wirepb.Event
			c.StampEvent(&early) // before any sample: untrusted, repaired later
			pollN(t, c, dev, 5, 10*time.Second)
			var ev wirepb.Event
			c.StampEvent(&ev)
			if !c.RepairEvent(&early) {
				t.Fatal("not repaired")
			}
			for _, e := range []*wirepb.Event{&ev, &early} {
				if e.Method == wirepb.TimeMethod_TIME_METHOD_UNTRUSTED {
					t.Fatalf("untrusted: %+v", e)
				}
				if (e.OffsetNs != 0) != tc.applied {
					t.Errorf("offset %v ± %v applied %v, want %v", time.Duration(e.OffsetNs), time.Duration(e.UncertaintyNs), e.OffsetNs != 0, tc.applied)
				}
				truth := ref.at(time.Duration(e.MonoNs))
				if err := time.Duration(e.DeviceTimeNs + e.OffsetNs - truth).Abs(); err > time.Duration(e.UncertaintyNs) {
					t.Errorf("corrected time %v off, uncertainty %v", err, time.Duration(e.UncertaintyNs))
				}
			}
		})
	}
}
