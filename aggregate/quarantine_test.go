package aggregate

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// quarantineOptions: one-minute windows, everything else as testOptions,
// with a fake clock for Tick.
func quarantineOptions(clk *fakeClock) Options {
	o := testOptions()
	o.Clock = clk.Now
	return o
}

func tumbling1m(metric string) Query {
	return Query{Metric: metric, Window: WindowSpec{Kind: Tumbling, Size: time.Minute},
		From: t0.Add(-time.Hour), To: t0.Add(10 * 365 * 24 * time.Hour)}
}

func countAll(ws []WindowResult) (n uint64) {
	for _, w := range ws {
		n += w.Count
	}
	return n
}

// TestQuarantineFutureEvents: events further ahead of processing time than
// future_horizon (their uncertainty credited up to it) open no window:
// they are held, counted and listed; events within it enter as before.
func TestQuarantineFutureEvents(t *testing.T) {
	clk := &fakeClock{now: t0}
	e := newEngine(t, quarantineOptions(clk))
	now := at(time.Minute)
	year := 365 * 24 * time.Hour
	b := &Batch{Seq: 1, Device: "f", Stream: sid(1), ServerTime: now, Events: []Event{
		{Seq: 1, Metric: "m", Value: 1, Time: at(4 * year)},
		{Seq: 2, Metric: "m", Value: 2, Time: at(5 * year), Tags: []Tag{{"k", "v"}}},
		// within the horizon: 50 minutes ahead
		{Seq: 3, Metric: "m", Value: 3, Time: at(51 * time.Minute)},
		// 90 minutes ahead with 45 minutes of uncertainty: may be 45 ahead
		{Seq: 4, Metric: "m", Value: 4, Time: at(91 * time.Minute), Uncertainty: int64(45 * time.Minute)},
		// a claimed uncertainty of ten years is credited only up to the horizon
		{Seq: 5, Metric: "m", Value: 5, Time: at(3 * time.Hour), Uncertainty: int64(10 * year)},
	}}
	mustApply(t, e, b)
	held := e.Held()
	if !errors.Is(held, ErrQuarantined) || !strings.Contains(held.Error(), `3 events from device "f"`) ||
		!strings.Contains(held.Error(), "future_horizon=1h0m0s") {
		t.Fatalf("Held() = %v, want ErrQuarantined naming the device, count and future_horizon", held)
	}
	if got := countAll(mustQuery(t, e, tumbling1m("m"))); got != 2 {
		t.Fatalf("%d events in windows, want the 2 within the horizon", got)
	}
	s := e.Stats()
	if s.Quarantined != 3 || s.QuarantineHeld != 3 || s.FutureStamped != 5 || s.LivePartials != 2 {
		t.Fatalf("stats %+v: want 3 quarantined and held, 5 future-stamped, 2 live partials", s)
	}
	evs, next := e.Quarantined(QuarantineQuery{Max: 10})
	if len(evs) != 3 || next != 3 {
		t.Fatalf("Quarantined: %d events, next %d", len(evs), next)
	}
	if x := evs[1]; x.Device != "f" || x.Seq != 2 || x.Value != 2 || !x.Time.Equal(ts(at(5*year))) ||
		x.Reason != HeldFuture || len(x.Tags) != 1 || !x.Arrived.Equal(ts(now)) ||
		!x.EntersAt.Equal(ts(at(5*year-time.Hour))) {
		t.Fatalf("held event %+v", x)
	}
	if x := evs[2]; x.Seq != 5 || !x.EntersAt.Equal(ts(at(time.Hour))) {
		t.Fatalf("event with a huge uncertainty %+v: want it held until 1h (3h - the 1h credited - the 1h horizon)", x)
	}
	if evs, _ := e.Quarantined(QuarantineQuery{From: 1, Max: 1, Device: "f"}); len(evs) != 1 || evs[0].Offset != 1 {
		t.Fatalf("page from 1: %+v", evs)
	}
	if evs, _ := e.Quarantined(QuarantineQuery{Max: 10, Device: "other"}); len(evs) != 0 {
		t.Fatalf("other device: %+v", evs)
	}
	if wm := e.Stats().Watermark; !wm.IsZero() && wm.After(ts(now+int64(time.Minute))) {
		t.Fatalf("watermark %v pushed by future events", wm)
	}
}

// TestQuarantineRelease: held events enter their windows when processing
// time (batches' server time or the clock of Tick) reaches them, and not
// before.
func TestQuarantineRelease(t *testing.T) {
	clk := &fakeClock{now: t0}
	e := newEngine(t, quarantineOptions(clk))
	mustApply(t, e, batchOf("f", 1, at(0), ev{seq: 1, metric: "m", v: 7, t: at(3 * time.Hour)}))
	clk.now = t0.Add(2*time.Hour - time.Second) // 3h is still more than 1h ahead
	e.Tick()
	if s := e.Stats(); s.QuarantineHeld != 1 || s.QuarantineReleased != 0 {
		t.Fatalf("released early: %+v", s)
	}
	clk.now = t0.Add(2 * time.Hour)
	e.Tick()
	if s := e.Stats(); s.QuarantineHeld != 0 || s.QuarantineReleased != 1 || s.Events != 1 {
		t.Fatalf("not released at 2h: %+v", s)
	}
	ws := mustQuery(t, e, tumbling1m("m"))
	if len(ws) != 1 || ws[0].Count != 1 || ws[0].Sum != 7 || !ws[0].Start.Equal(t0.Add(3*time.Hour)) {
		t.Fatalf("windows after release %+v", ws)
	}
	// The same through a batch's server time.
	mustApply(t, e, batchOf("g", 2, at(2*time.Hour), ev{seq: 1, metric: "n", v: 1, t: at(5 * time.Hour)}))
	mustApply(t, e, batchOf("h", 3, at(4*time.Hour), ev{seq: 1, metric: "x", v: 1, t: at(4 * time.Hour)}))
	if got := countAll(mustQuery(t, e, tumbling1m("n"))); got != 1 {
		t.Fatalf("%d events of n after a batch at 4h, want 1", got)
	}
}

// TestQuarantineBound: the quarantine holds quarantine_size events; past
// it the event that would wait longest is dropped, counted and reported
// as ErrQuarantineFull, and the nearest ones stay.
func TestQuarantineBound(t *testing.T) {
	clk := &fakeClock{now: t0}
	opt := quarantineOptions(clk)
	opt.QuarantineSize = 3
	e := newEngine(t, opt)
	b := &Batch{Device: "f", Stream: sid(1), ServerTime: at(0)}
	for i, h := range []int{10, 2, 30, 5, 3} {
		b.Events = append(b.Events, Event{Seq: uint64(i + 1), Metric: "m", Value: float64(h), Time: at(time.Duration(h) * time.Hour)})
	}
	err := e.Apply(b)
	if !errors.Is(err, ErrQuarantineFull) || !strings.Contains(err.Error(), "2 held events dropped") ||
		!strings.Contains(err.Error(), "quarantine_size=3") {
		t.Fatalf("Apply = %v, want ErrQuarantineFull naming 2 events and quarantine_size", err)
	}
	s := e.Stats()
	if s.QuarantineHeld != 3 || s.QuarantineDropped != 2 || s.Quarantined != 5 {
		t.Fatalf("stats %+v", s)
	}
	evs, _ := e.Quarantined(QuarantineQuery{Max: 10})
	var got []float64
	for _, x := range evs {
		got = append(got, x.Value)
	}
	if fmt.Sprint(got) != "[2 5 3]" {
		t.Fatalf("held %v, want the three nearest [2 5 3] in arrival order", got)
	}
	// A nearer event still gets in, dropping the furthest held (5h).
	if err := e.Apply(batchOf("g", 2, at(0), ev{seq: 1, metric: "m", v: 4, t: at(4 * time.Hour)})); !errors.Is(err, ErrQuarantineFull) {
		t.Fatalf("Apply = %v", err)
	}
	evs, _ = e.Quarantined(QuarantineQuery{Max: 10})
	if len(evs) != 3 || evs[2].Value != 4 || evs[1].Value != 3 {
		t.Fatalf("held %+v, want 2, 3, 4", evs)
	}
	clk.now = t0.Add(100 * time.Hour)
	e.Tick()
	if n := countAll(mustQuery(t, e, tumbling1m("m"))); n != 3 {
		t.Fatalf("%d events released, want 3", n)
	}
}

// TestNonFinalPartialsCapped: partials of windows that are not final no
// longer grow past max_live_partials: an event that needs one more waits
// in the quarantine, and enters once final partials can make room.
func TestNonFinalPartialsCapped(t *testing.T) {
	clk := &fakeClock{now: t0}
	opt := quarantineOptions(clk)
	opt.MaxLivePartials = 20
	e := newEngine(t, opt)
	// One device, 50 events 10 s apart within the horizon: 50 buckets
	// ahead of the watermark, none final.
	b := &Batch{Seq: 1, Device: "f", Stream: sid(1), ServerTime: at(0)}
	for i := range 50 {
		b.Events = append(b.Events, Event{Seq: uint64(i + 1), Metric: "m", Value: 1, Time: at(time.Duration(i) * 10 * time.Second)})
	}
	mustApply(t, e, b)
	held := e.Held()
	if !errors.Is(held, ErrPartialsLimit) || !strings.Contains(held.Error(), "max_live_partials=20") {
		t.Fatalf("Held() = %v, want ErrPartialsLimit naming max_live_partials", held)
	}
	s := e.Stats()
	if s.LivePartials != 20 || s.HeldForPartials != 30 || s.QuarantineHeld != 30 {
		t.Fatalf("stats %+v: want 20 live partials and 30 events held", s)
	}
	if evs, _ := e.Quarantined(QuarantineQuery{Max: 1}); len(evs) != 1 || evs[0].Reason != HeldPartials {
		t.Fatalf("held %+v", evs)
	}
	// Time passes: windows become final, their partials leave memory, and
	// the held events enter as room appears, never above the cap.
	for m := 1; m <= 20; m++ {
		clk.now = t0.Add(time.Duration(m) * time.Minute)
		e.Tick()
		if n := e.Stats().LivePartials; n > opt.MaxLivePartials {
			t.Fatalf("%d live partials at minute %d, cap %d", n, m, opt.MaxLivePartials)
		}
	}
	s = e.Stats()
	if s.QuarantineHeld != 0 || s.QuarantineReleased != 30 || s.Events != 50 {
		t.Fatalf("after the watermark passed: %+v", s)
	}
	if n := countAll(mustQuery(t, e, tumbling1m("m"))); n != 50 {
		t.Fatalf("%d events in windows, want 50", n)
	}
}

// TestMaxSeriesPerDevice: one device cannot create more than
// max_series_per_device series; other devices still can.
func TestMaxSeriesPerDevice(t *testing.T) {
	opt := testOptions()
	opt.MaxSeriesPerDevice = 2
	e := newEngine(t, opt)
	b := &Batch{Device: "d", Stream: sid(1), ServerTime: at(time.Minute)}
	for i := range 4 {
		b.Events = append(b.Events, Event{Seq: uint64(i + 1), Metric: "m", Tags: []Tag{{"k", string(rune('a' + i))}}, Value: 1, Time: at(0)})
	}
	err := e.Apply(b)
	if !errors.Is(err, ErrSeriesLimit) || !strings.Contains(err.Error(), "max_series_per_device=2") {
		t.Fatalf("Apply = %v, want ErrSeriesLimit naming max_series_per_device", err)
	}
	mustApply(t, e, batchOf("other", 2, at(time.Minute), ev{seq: 1, metric: "m", v: 1, t: at(0)}))
	if s := e.Stats(); s.Series != 3 || s.SeriesDropped != 2 || s.DeviceSeriesDropped != 2 {
		t.Fatalf("stats %+v", s)
	}
}

// TestQuarantineOptions: defaults, and future_horizon below
// max_future_skew is refused by name.
func TestQuarantineOptions(t *testing.T) {
	var o Options
	o.EnsureDefaults()
	if o.FutureHorizon != time.Hour || o.QuarantineSize != 100_000 || o.MaxSeriesPerDevice != 100_000 {
		t.Fatalf("defaults %v %d %d", o.FutureHorizon, o.QuarantineSize, o.MaxSeriesPerDevice)
	}
	o = Options{MaxFutureSkew: 3 * time.Hour}
	o.EnsureDefaults()
	if o.FutureHorizon != 3*time.Hour {
		t.Fatalf("future_horizon %v, want max_future_skew when longer", o.FutureHorizon)
	}
	for _, c := range []struct {
		field string
		set   func(*Options)
	}{
		{"future_horizon", func(o *Options) { o.FutureHorizon = time.Second }},
		{"quarantine_size", func(o *Options) { o.QuarantineSize = -1 }},
		{"max_series_per_device", func(o *Options) { o.MaxSeriesPerDevice = -1 }},
	} {
		o := testOptions()
		c.set(&o)
		o.EnsureDefaults()
		if err := o.Validate(); !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), c.field+":") {
			t.Fatalf("%s: %v", c.field, err)
		}
	}
}

// logEntry is one entry of a hub-like log: a batch, or a tick moving
// processing time to tick.
type logEntry struct {
	b    *Batch
	seq  uint64
	tick time.Time
}

func (x logEntry) apply(t *testing.T, e *Engine, clk *fakeClock) {
	t.Helper()
	if x.b != nil {
		mustApply(t, e, x.b)
		return
	}
	clk.now = x.tick
	if err := e.TickSeq(x.seq); err != nil {
		t.Fatal(err)
	}
}

// quarantineLog is three hours of device a every minute, a logged tick
// every minute, and at minute 20 device f sending 40 events 10 s apart
// 5 to 12 minutes ahead (they fill max_live_partials with partials that
// are not final), then a late batch of a for minute 5 (final, evicted):
// its events wait for room, and enter, reloading the stored partial, when
// f's windows become final.
func quarantineLog() []logEntry {
	var out []logEntry
	var seqA, seqF, pos uint64
	add := func(x logEntry) {
		pos++
		x.seq = pos
		if x.b != nil {
			x.b.Seq = pos
		}
		out = append(out, x)
	}
	for m := 1; m <= 180; m++ {
		min := time.Duration(m) * time.Minute
		add(logEntry{b: series10s("a", 1, &seqA, min-time.Minute, min, at(min))})
		if m == 20 {
			b := &Batch{Device: "f", Stream: sid(2), ServerTime: at(min)}
			for i := range 40 {
				seqF++
				b.Events = append(b.Events, Event{Seq: seqF, Metric: "m", Value: 2, Time: at(min + 5*time.Minute + time.Duration(i)*10*time.Second)})
			}
			add(logEntry{b: b})
			late := series10s("a", 3, new(uint64), 5*time.Minute, 6*time.Minute, at(min+time.Second))
			for i := range late.Events {
				late.Events[i].Value = 100
			}
			add(logEntry{b: late})
		}
		add(logEntry{tick: t0.Add(min + 30*time.Second)})
	}
	return out
}

// TestQuarantineReplay: a restart that restores a checkpoint taken while
// events were held and replays the log after it, on a store that kept the
// partials written after the checkpoint (as Badger does), ends with the
// same answers as a run without the restart: held events released by a
// tick are neither lost nor counted twice, though the partial they entered
// was evicted, with them, before the crash.
func TestQuarantineReplay(t *testing.T) {
	log := quarantineLog()
	opt := testOptions()
	opt.EvictAfter = time.Minute
	opt.MaxLivePartials = 30
	run := func(store PartialStore) (*Engine, *fakeClock) {
		clk := &fakeClock{now: t0}
		o := opt
		o.Clock, o.Store = clk.Now, store
		return newEngine(t, o), clk
	}
	whole, wclk := run(durableStore{NewMemStore()})
	for _, x := range log {
		x.apply(t, whole, wclk)
	}
	ws := whole.Stats()
	if ws.HeldForPartials == 0 || ws.QuarantineReleased != ws.HeldForPartials || ws.QuarantineHeld != 0 {
		t.Fatalf("the scenario should hold events for max_live_partials and release them all: %+v", ws)
	}
	want := mustQuery(t, whole, tumbling1m("m"))

	store := durableStore{NewMemStore()}
	first, fclk := run(store)
	var snap []byte
	ckpt, crash := -1, -1
	for i, x := range log {
		x.apply(t, first, fclk)
		s := first.Stats()
		if ckpt < 0 && s.QuarantineHeld > 0 && x.b != nil && x.b.Device == "a" && x.b.Stream == sid(3) {
			ckpt = i
			if snap, _ = first.Snapshot(); snap == nil {
				t.Fatal("no snapshot")
			}
		}
		if ckpt >= 0 && s.QuarantineHeld == 0 && s.Evicted > 0 {
			// Released, and the minute-5 partial holding the late
			// events evicted again: crash a few entries later.
			crash = i + 5
			break
		}
	}
	if ckpt < 0 || crash < 0 {
		t.Fatalf("checkpoint at %d, crash at %d: the scenario did not hold and release", ckpt, crash)
	}
	for _, x := range log[ckpt+1 : crash+1] {
		x.apply(t, first, fclk)
	}

	second, sclk := run(store) // restart on the same durable store
	if err := second.Restore(snap); err != nil {
		t.Fatal(err)
	}
	if n := second.Stats().QuarantineHeld; n == 0 {
		t.Fatal("the checkpoint holds no quarantined events")
	}
	for _, x := range log[ckpt+1:] {
		x.apply(t, second, sclk)
	}
	got := mustQuery(t, second, tumbling1m("m"))
	if len(got) != len(want) {
		t.Fatalf("%d windows after restart and replay, want %d", len(got), len(want))
	}
	for i := range got {
		if g, w := got[i], want[i]; g.Count != w.Count || g.Sum != w.Sum || g.Max != w.Max {
			t.Fatalf("window %v after restart and replay: count %d sum %v, want %d %v", g.Start, g.Count, g.Sum, w.Count, w.Sum)
		}
	}
	if s := second.Stats(); s.QuarantineHeld != 0 || s.ReplaySkipped == 0 {
		t.Fatalf("after replay %+v: want nothing held and the released events skipped as already stored", s)
	}
}

// TestQuarantineSnapshot: the quarantine survives Snapshot and Restore
// (offsets, reasons and counters), so the restored engine releases the
// same events; a smaller quarantine_size keeps the nearest ones.
func TestQuarantineSnapshot(t *testing.T) {
	clk := &fakeClock{now: t0}
	e := newEngine(t, quarantineOptions(clk))
	b := &Batch{Device: "f", Stream: sid(1), ServerTime: at(0)}
	for i, h := range []int{10, 2, 30, 5} {
		b.Events = append(b.Events, Event{Seq: uint64(i + 1), Metric: "m", Value: float64(h), Time: at(time.Duration(h) * time.Hour), Tags: []Tag{{"k", "v"}}})
	}
	mustApply(t, e, b)
	snap, _ := e.Snapshot()
	r := newEngine(t, quarantineOptions(clk))
	if err := r.Restore(snap); err != nil {
		t.Fatal(err)
	}
	again, _ := r.Snapshot()
	if string(again) != string(snap) {
		t.Fatal("restored engine snapshots differently")
	}
	a, _ := e.Quarantined(QuarantineQuery{Max: 10})
	c, _ := r.Quarantined(QuarantineQuery{Max: 10})
	if fmt.Sprint(a) != fmt.Sprint(c) {
		t.Fatalf("held before %+v\nafter %+v", a, c)
	}
	small := quarantineOptions(clk)
	small.QuarantineSize = 2
	s := newEngine(t, small)
	if err := s.Restore(snap); err != nil {
		t.Fatal(err)
	}
	evs, _ := s.Quarantined(QuarantineQuery{Max: 10})
	if len(evs) != 2 || evs[0].Value != 2 || evs[1].Value != 5 || s.Stats().QuarantineDropped != 2 {
		t.Fatalf("smaller quarantine kept %+v", evs)
	}
	for i := 0; i < len(snap); i += 5 {
		if err := newEngine(t, quarantineOptions(clk)).Restore(snap[:i]); !errors.Is(err, ErrCorruptSnapshot) {
			t.Fatalf("truncated at %d: %v", i, err)
		}
	}
}
