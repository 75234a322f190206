package aggregate

import (
	"errors"
	"testing"
	"time"
)

// series10s feeds one stream events every 10 s over [from, to) (value 1).
func series10s(dev string, stream int, seq *uint64, from, to time.Duration, server int64) *Batch {
	b := &Batch{Device: dev, Stream: sid(stream), ServerTime: server}
	for d := from; d < to; d += 10 * time.Second {
		*seq++
		b.Events = append(b.Events, Event{Seq: *seq, Metric: "m", Value: 1, Time: at(d + time.Second)})
	}
	return b
}

func find(ws []WindowResult, start time.Duration) *WindowResult {
	for i := range ws {
		if ws[i].Start.Equal(t0.Add(start)) {
			return &ws[i]
		}
	}
	return nil
}

// TestLatenessRules walks one scenario through the lateness rules:
// provisional, final, late within the horizon (revision per Apply, late
// only for windows that were final), beyond the horizon (late log).
func TestLatenessRules(t *testing.T) {
	opt := testOptions()
	opt.LateHorizon = time.Hour
	e := newEngine(t, opt)
	var sa, sb uint64
	hello := ev{metric: "hello", t: at(0)} // both streams known before data flows
	mustApply(t, e, batchOf("a", 1, at(time.Minute), hello))
	mustApply(t, e, batchOf("b", 2, at(time.Minute), hello))
	mustApply(t, e, series10s("b", 2, &sb, 0, 30*time.Second, at(time.Minute)))
	mustApply(t, e, series10s("a", 1, &sa, 0, 50*time.Second, at(time.Minute)))
	w10 := WindowSpec{Kind: Tumbling, Size: 10 * time.Second}
	w1m := WindowSpec{Kind: Tumbling, Size: time.Minute}
	steps := []struct {
		name string
		do   func()
		spec WindowSpec
		at   time.Duration
		want WindowResult // Count, Final, Revision, Late, Behind
	}{
		{"provisional while b is behind", func() {}, w10, 30 * time.Second, WindowResult{Count: 1, Final: false, Behind: 1}},
		{"final below the hub watermark", func() {}, w10, 10 * time.Second, WindowResult{Count: 2, Final: true}},
		{"late event merges and bumps revision", func() {
			mustApply(t, e, batchOf("b", 2, at(70*time.Second), ev{seq: 100, metric: "m", v: 1, t: at(12 * time.Second)}))
		}, w10, 10 * time.Second, WindowResult{Count: 3, Final: true, Revision: 1, Late: 1}},
		{"two late events in one batch: one revision", func() {
			mustApply(t, e, batchOf("b", 2, at(71*time.Second),
				ev{seq: 101, metric: "m", v: 1, t: at(13 * time.Second)}, ev{seq: 102, metric: "m", v: 1, t: at(14 * time.Second)}))
		}, w10, 10 * time.Second, WindowResult{Count: 5, Final: true, Revision: 2, Late: 3}},
		{"not late for a window that was provisional", func() {
			mustApply(t, e, series10s("a", 1, &sa, 50*time.Second, 3*time.Minute, at(2*time.Minute)))
			mustApply(t, e, series10s("b", 2, &sb, 30*time.Second, 3*time.Minute, at(2*time.Minute)))
		}, w1m, 0, WindowResult{Count: 15, Final: true}},
	}
	for _, s := range steps {
		s.do()
		checkWindowAt(t, e, s.name, s.spec, s.at, s.want, true)
	}
	// Beyond the horizon: the late log, not the windows.
	mustApply(t, e, series10s("a", 1, &sa, 3*time.Minute, 2*time.Hour, at(2*time.Hour)))
	mustApply(t, e, batchOf("b", 2, at(2*time.Hour), ev{seq: 5000, metric: "m", v: 7, t: at(15 * time.Second)}))
	if got := find(mustQuery(t, e, dayQuery("m", w10)), 10*time.Second); got.Count != 5 {
		t.Fatalf("too-late event merged: count %d", got.Count)
	}
	late, next, err := e.LateEvents(0, 10)
	if err != nil || len(late) != 1 || next != 1 || late[0].Seq != 5000 || late[0].Device != "b" || late[0].Value != 7 {
		t.Fatalf("late log: %+v next %d err %v", late, next, err)
	}
	if s := e.Stats(); s.TooLate != 1 || s.Late != 3 {
		t.Fatalf("stats: too late %d late %d", s.TooLate, s.Late)
	}
}

// TestDeviceBackAfterADay: a device offline for a day is released by the
// idle timeout, and its backlog corrects yesterday's final windows.
func TestDeviceBackAfterADay(t *testing.T) {
	opt := testOptions()
	opt.LateHorizon = 72 * time.Hour
	e := newEngine(t, opt)
	var sa, sb uint64
	mustApply(t, e, series10s("a", 1, &sa, 0, time.Hour, at(time.Hour)))
	mustApply(t, e, series10s("b", 2, &sb, 0, 10*time.Minute, at(10*time.Minute)))
	for h := 1; h <= 25; h++ { // a keeps sending; b is offline
		mustApply(t, e, series10s("a", 1, &sa, time.Duration(h)*time.Hour, time.Duration(h+1)*time.Hour, at(time.Duration(h+1)*time.Hour)))
	}
	q := Query{Metric: "m", Window: WindowSpec{Kind: Tumbling, Size: time.Hour}, From: t0, To: t0.Add(time.Hour)}
	before := mustQuery(t, e, q)[0]
	if !before.Final || before.Count != 360+60 || before.Revision != 0 {
		t.Fatalf("before: %+v", before)
	}
	b := series10s("b", 2, &sb, 10*time.Minute, time.Hour, at(26*time.Hour))
	b.Backlog = true
	mustApply(t, e, b)
	after := mustQuery(t, e, q)[0]
	if after.Count != 720 || after.Revision != 1 || after.Late != 300 || !after.Final {
		t.Fatalf("after: %+v", after)
	}
}

// TestBacklogAndFutureStreams: a stream draining a backlog and a
// future-stamped stream neither hold back nor push the hub watermark.
func TestBacklogAndFutureStreams(t *testing.T) {
	e := newEngine(t, testOptions())
	var sa, sc uint64
	now := 10 * time.Minute
	mustApply(t, e, series10s("a", 1, &sa, 0, now, at(now)))
	backlog := series10s("c", 3, &sc, 0, time.Minute, at(now)) // old events, more queued
	backlog.Backlog = true
	mustApply(t, e, backlog)
	future := batchOf("f", 4, at(now), ev{seq: 1, metric: "m", v: 1, t: at(now + 24*time.Hour)})
	mustApply(t, e, future)
	wm := e.Stats().Watermark
	if want := t0.Add(now - 10*time.Second + time.Second); !wm.Equal(want) {
		t.Fatalf("watermark %v, want a's %v (backlog must not hold it back, future must not push it)", wm.Sub(t0), want.Sub(t0))
	}
	if s := e.Stats(); s.FutureStamped != 1 {
		t.Fatalf("future-stamped %d, want 1", s.FutureStamped)
	}
	// Everyone idle: the watermark may reach what was seen, but the future
	// stream only up to its server time + max_future_skew.
	if s := e.Stats(); s.Late != 6 {
		t.Fatalf("late %d, want the backlog's 6 old events", s.Late)
	}
	clk := &fakeClock{now: t0.Add(now + time.Minute + time.Second)}
	e.opt.Clock = clk.Now
	e.Tick()
	if wm := e.Stats().Watermark; !wm.Equal(clk.now.Add(-time.Minute)) {
		t.Fatalf("idle watermark %v, want processing time - idle_timeout %v", wm.Sub(t0), now+time.Second)
	}
	// a's next event, 30 s after its last, is not late.
	mustApply(t, e, batchOf("a", 1, clk.now.UnixNano(), ev{seq: 1000, metric: "m", v: 1, t: at(now + 30*time.Second)}))
	if s := e.Stats(); s.Late != 6 {
		t.Fatalf("late %d, want 6", s.Late)
	}
}

// TestIdleRelease: a quiet stream stops holding the watermark back after
// idle_timeout, by batch server time or by Tick with the injected clock.
func TestIdleRelease(t *testing.T) {
	clk := &fakeClock{now: t0}
	opt := testOptions()
	opt.Clock = clk.Now
	e := newEngine(t, opt)
	var sa, sb uint64
	mustApply(t, e, series10s("b", 2, &sb, 0, 20*time.Second, at(time.Minute)))
	mustApply(t, e, series10s("a", 1, &sa, 0, time.Minute, at(time.Minute)))
	if wm := e.Stats().Watermark; !wm.Equal(t0.Add(11 * time.Second)) {
		t.Fatalf("watermark %v, want b's 11s", wm.Sub(t0))
	}
	mustApply(t, e, series10s("a", 1, &sa, time.Minute, 2*time.Minute, at(2*time.Minute+time.Second)))
	if wm := e.Stats().Watermark; !wm.Equal(t0.Add(111 * time.Second)) {
		t.Fatalf("watermark %v, want a's 111s once b is idle", wm.Sub(t0))
	}
	clk.now = t0.Add(10 * time.Minute) // a idle too: Tick releases everything seen
	e.Tick()
	ws := mustQuery(t, e, dayQuery("m", WindowSpec{Kind: Tumbling, Size: time.Minute}))
	if last := ws[len(ws)-1]; !last.Final {
		t.Fatalf("last window not final after everyone went idle: %+v", last)
	}
}

// TestSeriesLimit: series beyond max_series are refused with a clear
// error and a counter; existing series keep working.
func TestSeriesLimit(t *testing.T) {
	opt := testOptions()
	opt.MaxSeries = 3
	e := newEngine(t, opt)
	b := &Batch{Device: "d", Stream: sid(1), ServerTime: at(time.Minute)}
	for i := 0; i < 5; i++ {
		b.Events = append(b.Events, Event{Seq: uint64(i + 1), Metric: "m", Tags: []Tag{{"k", string(rune('a' + i))}}, Value: 1, Time: at(0)})
	}
	b.Events = append(b.Events, Event{Seq: 6, Metric: "m", Tags: []Tag{{"k", "a"}}, Value: 1, Time: at(0)})
	err := e.Apply(b)
	if !errors.Is(err, ErrSeriesLimit) {
		t.Fatalf("got %v, want ErrSeriesLimit", err)
	}
	if s := e.Stats(); s.SeriesDropped != 2 || s.Series != 3 || s.Events != 4 {
		t.Fatalf("stats %+v", s)
	}
}

// TestUntrustedAndInvalid: untrusted and non-finite events are counted and
// kept out of windows.
func TestUntrustedAndInvalid(t *testing.T) {
	e := newEngine(t, testOptions())
	b := batchOf("d", 1, at(time.Minute), ev{seq: 1, metric: "m", v: 1, t: at(0)})
	b.Events = append(b.Events, Event{Seq: 2, Metric: "m", Value: 5, Time: at(0), Untrusted: true})
	b.Events = append(b.Events, Event{Seq: 3, Metric: "m", Value: nan(), Time: at(0)})
	mustApply(t, e, b)
	ws := mustQuery(t, e, dayQuery("m", WindowSpec{Kind: Tumbling, Size: time.Minute}))
	if len(ws) != 1 || ws[0].Count != 1 {
		t.Fatalf("windows %+v", ws)
	}
	if s := e.Stats(); s.Untrusted != 1 || s.Invalid != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// TestBehindPerDevice: grouped by device, a window's behind counts only
// that device's streams, with or without a device filter; ungrouped, it
// counts every known stream.
func TestBehindPerDevice(t *testing.T) {
	e := newEngine(t, testOptions())
	var sa, sb uint64
	mustApply(t, e, series10s("b", 2, &sb, 0, 30*time.Second, at(time.Minute)))
	mustApply(t, e, series10s("a", 1, &sa, 0, 50*time.Second, at(time.Minute)))
	w10 := WindowSpec{Kind: Tumbling, Size: 10 * time.Second}
	behind := func(q Query, device string) int {
		t.Helper()
		for _, w := range mustQuery(t, e, q) {
			if w.Start.Equal(t0.Add(20*time.Second)) && (device == "" || w.Group["device"] == device) {
				return w.Behind
			}
		}
		t.Fatalf("no window at 20s for %q", device)
		return -1
	}
	byDevice := dayQuery("m", w10, "device")
	onlyB := byDevice
	onlyB.Device = "b"
	for _, c := range []struct {
		name   string
		q      Query
		device string
		want   int
	}{
		{"ungrouped", dayQuery("m", w10), "", 1},
		{"device a", byDevice, "a", 0},
		{"device b", byDevice, "b", 1},
		{"device b, filtered", onlyB, "b", 1},
	} {
		if got := behind(c.q, c.device); got != c.want {
			t.Errorf("%s: behind %d, want %d", c.name, got, c.want)
		}
	}
}

// checkWindowAt checks the count, final, revision and late of the window
// of metric m starting at t0+at against want, and its behind too when
// behind is set; step names the check in a failure.
func checkWindowAt(t *testing.T, e *Engine, step string, spec WindowSpec, at time.Duration, want WindowResult, behind bool) {
	t.Helper()
	got := find(mustQuery(t, e, dayQuery("m", spec)), at)
	if got == nil {
		t.Fatalf("%s: no window at %v", step, at)
	}
	w := want
	if !behind {
		w.Behind = got.Behind
	}
	if got.Count != w.Count || got.Final != w.Final || got.Revision != w.Revision || got.Late != w.Late || got.Behind != w.Behind {
		t.Fatalf("%s: got count %d final %v revision %d late %d behind %d, want %d %v %d %d %d (watermark %v)", step,
			got.Count, got.Final, got.Revision, got.Late, got.Behind, w.Count, w.Final, w.Revision, w.Late, w.Behind, e.Stats().Watermark.Sub(t0))
	}
}
