package aggregate

import (
	"testing"
	"time"
)

// TestAllowedLateness walks one stream through allowed_lateness = 30s with
// late_horizon = 1h, step by step; each step applies one batch (whose
// newest event moves the stream's watermark, which is the hub watermark)
// and checks a window after it.
//
// The window [0s, 10s) is provisional while the hub watermark is in
// [10s, 40s) and final from 40s on. An event for it in that gap merges in
// without being late; after 40s a late event bumps revision and late.
//
// The late horizon is measured from the end of the event's resolution
// bucket plus allowed_lateness (engine.go limits), not from the end of
// the window: an event is merged while the hub watermark before its batch
// is below bucketEnd + allowed_lateness + late_horizon. For windows of one
// bucket this is "late_horizon after the window became final"; for a
// wider window, its early buckets close before its late ones (the last
// two steps).
func TestAllowedLateness(t *testing.T) {
	opt := testOptions()
	opt.AllowedLateness = 30 * time.Second
	opt.LateHorizon = time.Hour
	opt.EvictAfter = 48 * time.Hour // keep partials live: this test is about lateness only
	e := newEngine(t, opt)
	w10 := WindowSpec{Kind: Tumbling, Size: 10 * time.Second}
	w1m := WindowSpec{Kind: Tumbling, Size: time.Minute}
	// one applies a single event of stream a at event time d; the batch
	// arrives at max(d, now) so the future-skew cap never applies.
	var seq uint64
	now := time.Duration(0)
	one := func(d time.Duration) func() {
		return func() {
			seq++
			now = max(now, d)
			mustApply(t, e, batchOf("a", 1, at(now), ev{seq: seq, metric: "m", v: 1, t: at(d)}))
		}
	}
	steps := []struct {
		name        string
		do          func()
		spec        WindowSpec
		at          time.Duration
		want        WindowResult // Count, Final, Revision, Late
		late, tooLt uint64       // Stats().Late and TooLate after the step
	}{
		{"first event: open", one(time.Second), w10, 0,
			WindowResult{Count: 1}, 0, 0},
		{"watermark past the end: still provisional", one(25 * time.Second), w10, 0,
			WindowResult{Count: 1}, 0, 0},
		{"event in the allowed-lateness gap: merged, not late", one(5 * time.Second), w10, 0,
			WindowResult{Count: 2}, 0, 0},
		{"watermark 1ns short of end+30s: still provisional", one(40*time.Second - time.Nanosecond), w10, 0,
			WindowResult{Count: 2}, 0, 0},
		{"another event in the gap, watermark just short: not late", one(6 * time.Second), w10, 0,
			WindowResult{Count: 3}, 0, 0},
		{"watermark at end+30s: final", one(40 * time.Second), w10, 0,
			WindowResult{Count: 3, Final: true}, 0, 0},
		{"late event after end+30s: revision and late", one(7 * time.Second), w10, 0,
			WindowResult{Count: 4, Final: true, Revision: 1, Late: 1}, 1, 0},
		// [0s, 1m) is final at 90s. Its first bucket is final at 40s, so an
		// event for it at watermark 70s is late for [0s, 10s) but not for
		// [0s, 1m), which was still provisional.
		{"1m window between end and end+30s: provisional", one(70 * time.Second), w1m, 0,
			WindowResult{Count: 7}, 1, 0},
		{"event in the 1m window's gap: merged, no revision there", one(4 * time.Second), w1m, 0,
			WindowResult{Count: 8}, 2, 0},
		{"...but late for its final 10s window", func() {}, w10, 0,
			WindowResult{Count: 5, Final: true, Revision: 2, Late: 2}, 2, 0},
		{"1m window at end+30s: final, revision 0", one(90 * time.Second), w1m, 0,
			WindowResult{Count: 8, Final: true}, 2, 0},
		{"watermark 1ns short of bucket end+30s+1h", one(time.Hour + 40*time.Second - time.Nanosecond), w10, 0,
			WindowResult{Count: 5, Final: true, Revision: 2, Late: 2}, 2, 0},
		{"late event just inside the horizon: merged", one(8 * time.Second), w10, 0,
			WindowResult{Count: 6, Final: true, Revision: 3, Late: 3}, 3, 0},
		{"watermark at bucket end+30s+1h", one(time.Hour + 40*time.Second), w10, 0,
			WindowResult{Count: 6, Final: true, Revision: 3, Late: 3}, 3, 0},
		{"late event at the horizon: late log", one(9 * time.Second), w10, 0,
			WindowResult{Count: 6, Final: true, Revision: 3, Late: 3}, 3, 1},
		// [0s, 1m)'s own end+30s+1h is 1h1m30s, still ahead of the
		// watermark, but its first bucket's horizon has passed. Of its late
		// events only 8s came once it was final.
		{"1m window, event in its first bucket: late log", one(3 * time.Second), w1m, 0,
			WindowResult{Count: 9, Final: true, Revision: 1, Late: 1}, 3, 2},
		{"1m window, event in its last bucket: merged", one(55 * time.Second), w1m, 0,
			WindowResult{Count: 10, Final: true, Revision: 2, Late: 2}, 4, 2},
	}
	for _, s := range steps {
		s.do()
		checkWindowAt(t, e, s.name, s.spec, s.at, s.want, false)
		if st := e.Stats(); st.Late != s.late || st.TooLate != s.tooLt {
			t.Fatalf("%s: stats late %d too late %d, want %d %d", s.name, st.Late, st.TooLate, s.late, s.tooLt)
		}
	}
	late, _, err := e.LateEvents(0, 10)
	if err != nil || len(late) != 2 || !late[0].Time.Equal(t0.Add(9*time.Second)) || !late[1].Time.Equal(t0.Add(3*time.Second)) {
		t.Fatalf("late log: %+v %v", late, err)
	}
}

// TestAllowedLatenessWindowKinds checks finality against end +
// allowed_lateness for every window kind, ungrouped: each case feeds one
// stream the events at, then one event moving the watermark to wm, and
// expects the window starting at start to be final or not.
func TestAllowedLatenessWindowKinds(t *testing.T) {
	const al = 30 * time.Second
	tumbling := WindowSpec{Kind: Tumbling, Size: time.Minute}
	hopping := WindowSpec{Kind: Hopping, Size: 2 * time.Minute, Slide: time.Minute}
	sliding := WindowSpec{Kind: Sliding, Size: time.Minute}
	session := WindowSpec{Kind: Session, Gap: 30 * time.Second}
	// the session of events at 1s and 11s is [1s, 41s): final at 71s.
	cases := []struct {
		name      string
		spec      WindowSpec
		start, wm time.Duration
		final     bool
	}{
		{"tumbling, watermark at end", tumbling, 0, time.Minute, false},
		{"tumbling, watermark short of end+al", tumbling, 0, time.Minute + al - time.Nanosecond, false},
		{"tumbling, watermark at end+al", tumbling, 0, time.Minute + al, true},
		{"hopping, watermark short of end+al", hopping, 0, 2*time.Minute + al - time.Nanosecond, false},
		{"hopping, watermark at end+al", hopping, 0, 2*time.Minute + al, true},
		{"sliding, watermark short of end+al", sliding, 0, time.Minute + al - time.Nanosecond, false},
		{"sliding, watermark at end+al", sliding, 0, time.Minute + al, true},
		{"session, watermark short of end+al", session, time.Second, 71*time.Second - time.Nanosecond, false},
		{"session, watermark at end+al", session, time.Second, 71 * time.Second, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			opt := testOptions()
			opt.AllowedLateness = al
			e := newEngine(t, opt)
			mustApply(t, e, batchOf("a", 1, at(c.wm),
				ev{seq: 1, metric: "m", v: 1, t: at(time.Second)}, ev{seq: 2, metric: "m", v: 1, t: at(11 * time.Second)}))
			mustApply(t, e, batchOf("a", 1, at(c.wm), ev{seq: 3, metric: "w", v: 1, t: at(c.wm)}))
			got := find(mustQuery(t, e, dayQuery("m", c.spec)), c.start)
			if got == nil {
				t.Fatalf("no window at %v", c.start)
			}
			if got.Final != c.final || got.Count != 2 || got.Revision != 0 {
				t.Fatalf("window %v-%v at watermark %v: final %v count %d revision %d, want final %v count 2 revision 0",
					got.Start.Sub(t0), got.End.Sub(t0), e.Stats().Watermark.Sub(t0), got.Final, got.Count, got.Revision, c.final)
			}
		})
	}
}
