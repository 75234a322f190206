package rules

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"edgeflow/aggregate"
)

// engineRig is a real engine whose updates feed evaluators.
type engineRig struct {
	t   testing.TB
	clk *fakeClock
	eng *aggregate.Engine
	sub *aggregate.Subscription
	seq map[string]uint64
}

func newRig(t testing.TB) *engineRig {
	clk := &fakeClock{now: t0.Add(time.Hour)}
	eng, err := aggregate.New(aggregate.Options{Resolution: time.Second, AllowedLateness: 2 * time.Second,
		WatermarkInterval: time.Nanosecond, Clock: clk.Now, LateHorizon: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return &engineRig{t: t, clk: clk, eng: eng, sub: eng.Subscribe(1 << 16), seq: map[string]uint64{}}
}

// apply applies one batch and feeds every evaluator with it and the
// engine's updates.
func (g *engineRig) apply(evs []tev, evals ...*Evaluator) {
	b := batchOf(evs, g.seq, g.clk.now.UnixNano())
	for _, e := range evals {
		e.ObserveBatch(b)
	}
	if err := g.eng.Apply(b); err != nil {
		g.t.Fatal(err)
	}
	var ups []aggregate.Update
	for len(g.sub.Updates()) > 0 {
		ups = append(ups, <-g.sub.Updates())
	}
	for _, e := range evals {
		if err := e.Feed(g.eng, ups); err != nil {
			g.t.Fatal(err)
		}
	}
}

func allAlerts(t testing.TB, e *Evaluator) []Alert {
	as, _, err := e.Query(Filter{Limit: MaxQueryLimit})
	if err != nil {
		t.Fatal(err)
	}
	return as
}

// TestRestoreContinuesSameAlerts: an evaluator restored from a state
// saved mid-run and fed the rest of the inputs (the log replayed after the
// checkpoint) ends with the same alerts, ids, revisions and fired_at as
// one that never stopped, and re-sends nothing under a new identity.
func TestRestoreContinuesSameAlerts(t *testing.T) {
	rs := mustRules(t, `
rules:
  - {name: hot, metric: temp, window: "tumbling:10s", agg: avg, op: ">", value: 50, group_by: [device]}
  - {name: hot2, metric: temp, window: "tumbling:10s", agg: max, op: ">=", value: 90, group_by: [device], for: 2}
  - {name: quiet, kind: absence, metric: temp, after: 8s}
  - {name: seq, kind: sequence, first: {metric: temp, op: "<", value: 20}, then: {metric: temp, op: ">", value: 80}, within: 5s}
`)
	for seed := range uint64(10) {
		r := rand.New(rand.NewPCG(seed, 99))
		var evs []tev
		for range 200 {
			evs = append(evs, tev{dev: []string{"a", "b"}[r.IntN(2)], metric: "temp", v: float64(r.IntN(100)), t: at(time.Duration(r.IntN(200)) * 500 * time.Millisecond)})
		}
		batches := deliveries(r, evs, 0)
		cut := r.IntN(len(batches))
		rig := newRig(t)
		sent := map[string]uint64{} // id -> highest revision sent
		onAlert := func(as []Alert) {
			for _, a := range as {
				if a.Revision <= sent[a.ID] {
					t.Fatalf("alert %s revision %d sent after %d", a.ID, a.Revision, sent[a.ID])
				}
				sent[a.ID] = a.Revision
			}
		}
		whole := newEval(t, rs, Options{AllowedLateness: 2 * time.Second})
		part := newEval(t, rs, Options{AllowedLateness: 2 * time.Second, OnAlert: onAlert})
		for i, b := range batches {
			if i == cut {
				st, err := part.MarshalState()
				if err != nil {
					t.Fatal(err)
				}
				part = newEval(t, rs, Options{AllowedLateness: 2 * time.Second, OnAlert: onAlert})
				if err := part.RestoreState(st); err != nil {
					t.Fatal(err)
				}
			}
			rig.clk.now = rig.clk.now.Add(time.Second)
			rig.apply(b, whole, part)
		}
		for _, d := range []string{"a", "b"} {
			rig.apply([]tev{{dev: d, metric: "pace", t: at(10 * time.Minute)}}, whole, part)
		}
		w, p := allAlerts(t, whole), allAlerts(t, part)
		if len(w) != len(p) {
			t.Fatalf("seed %d: %d alerts, restored %d", seed, len(w), len(p))
		}
		for i := range w {
			if !reflect.DeepEqual(w[i], p[i]) {
				t.Fatalf("seed %d: restored evaluator differs:\n whole %+v\n part  %+v", seed, w[i], p[i])
			}
		}
		if whole.Stats().Alerts == 0 {
			t.Fatalf("seed %d: no alerts at all", seed)
		}
	}
}

func TestRestoreRejectsGarbage(t *testing.T) {
	e := newEval(t, nil, Options{})
	for _, s := range []string{"", "{", `{"version":2}`, `{"version":1,"alerts":[{}],"alert_seq":[]}`} {
		if err := e.RestoreState([]byte(s)); err == nil {
			t.Fatalf("RestoreState(%q) accepted", s)
		}
	}
}

// TestProvisionalFiresEarly: on: provisional fires before the window is
// final and the final value corrects it.
func TestProvisionalFiresEarly(t *testing.T) {
	rs := mustRules(t, `
rules:
  - {name: early, metric: temp, window: "tumbling:10s", agg: avg, op: ">", value: 50, on: provisional}
  - {name: late, metric: temp, window: "tumbling:10s", agg: avg, op: ">", value: 50}
`)
	rig := newRig(t)
	e := newEval(t, rs, Options{AllowedLateness: 2 * time.Second})
	rig.apply([]tev{{dev: "a", metric: "temp", v: 90, t: at(time.Second)}, {dev: "a", metric: "temp", v: 90, t: at(5 * time.Second)}}, e)
	if got := alertSet(t, e, Firing); len(got) != 1 || got[alertID("early", "", at(0))].Rule != "early" {
		t.Fatalf("provisional: firing %v", sortedIDs(got))
	}
	// A low reading in the same window, then the window becomes final.
	rig.apply([]tev{{dev: "a", metric: "temp", v: 0, t: at(6 * time.Second)}, {dev: "a", metric: "temp", v: 0, t: at(7 * time.Second)}, {dev: "a", metric: "temp", v: 1, t: at(20 * time.Second)}}, e)
	if got := alertSet(t, e, Firing); len(got) != 0 {
		t.Fatalf("after correction: firing %v", sortedIDs(got))
	}
	a, ok := e.Get(alertID("early", "", at(0)))
	if !ok || a.State != Resolved || a.Revision != 2 || a.Value != 45 {
		t.Fatalf("early alert %+v", a)
	}
	if _, ok := e.Get(alertID("late", "", at(0))); ok {
		t.Fatal("final rule fired on a provisional window")
	}
}

func TestOfflineByConnection(t *testing.T) {
	clk := &fakeClock{now: t0}
	e := newEval(t, mustRules(t, `rules: [{name: gone, kind: offline, after: 2m}]`), Options{Clock: clk.Now})
	e.Connection("d1", true, clk.now)
	e.Connection("d1", false, clk.now)
	clk.now = clk.now.Add(time.Minute)
	e.Tick()
	if n := e.Stats().Alerts; n != 0 {
		t.Fatalf("%d alerts after 1m offline", n)
	}
	clk.now = clk.now.Add(90 * time.Second)
	e.Tick()
	e.Tick()
	id := alertID("gone", "device=d1", t0.UnixNano())
	if a, ok := e.Get(id); !ok || a.State != Firing || a.Revision != 1 || !a.End.IsZero() {
		t.Fatalf("offline alert %+v %v", a, ok)
	}
	back := clk.now
	e.Connection("d1", true, back)
	if a, _ := e.Get(id); a.State != Resolved || !a.End.Equal(back) || a.Value != 150 {
		t.Fatalf("after reconnect %+v", a)
	}
}

func TestBufferFilling(t *testing.T) {
	e := newEval(t, mustRules(t, `
rules:
  - {name: full, kind: buffer, fill_ratio: 0.8}
  - {name: soon, kind: buffer, time_to_full: 10m}
`), Options{})
	st := func(used uint64, rate float64, sec int) BufferStatus {
		return BufferStatus{UsedBytes: used, CapacityBytes: 1000, FillRate: rate, At: t0.Add(time.Duration(sec) * time.Second)}
	}
	e.Buffer("d", st(100, 0.1, 0)) // 9000 s to full
	if n := e.Stats().Alerts; n != 0 {
		t.Fatalf("%d alerts", n)
	}
	e.Buffer("d", st(500, 1, 1)) // 500 s to full
	e.Buffer("d", st(850, 1, 2)) // over 0.8
	e.Buffer("d", st(860, 1, 3))
	if a, _ := e.Get(alertID("soon", "device=d", at(time.Second))); a.State != Firing {
		t.Fatalf("soon: %+v", a)
	}
	if a, _ := e.Get(alertID("full", "device=d", at(2*time.Second))); a.State != Firing || a.Value != 0.85 {
		t.Fatalf("full: %+v", a)
	}
	e.Buffer("d", st(100, -5, 4))
	if got := alertSet(t, e, Firing); len(got) != 0 {
		t.Fatalf("still firing %v", sortedIDs(got))
	}
	if s := e.Stats(); s.Alerts != 2 {
		t.Fatalf("%d alerts, want 2", s.Alerts)
	}
}

func TestQueryFiltersAndCursor(t *testing.T) {
	e := newEval(t, mustRules(t, `
rules:
  - {name: s, kind: sequence, first: {metric: a}, then: {metric: b}, within: 1m}
  - {name: q, kind: absence, metric: b, after: 30s}
`), Options{})
	var evs []aggregate.Event
	for i := range 50 {
		evs = append(evs, aggregate.Event{Metric: "a", Time: at(time.Duration(i) * time.Minute)}, aggregate.Event{Metric: "b", Time: at(time.Duration(i)*time.Minute + time.Second)})
	}
	e.ObserveBatch(&aggregate.Batch{Device: "d", Events: evs})
	all, next, err := e.Query(Filter{Rule: "s", Limit: MaxQueryLimit})
	if err != nil || next != "" || len(all) != 50 {
		t.Fatalf("%d alerts, next %q, err %v", len(all), next, err)
	}
	var paged []Alert
	cursor := ""
	for {
		as, nx, err := e.Query(Filter{Rule: "s", State: Firing, From: t0.Add(10 * time.Minute), To: t0.Add(40 * time.Minute), Limit: 7, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		paged = append(paged, as...)
		if nx == "" {
			break
		}
		cursor = nx
	}
	if len(paged) != 30 || !paged[0].Start.Equal(t0.Add(10*time.Minute)) || !paged[29].Start.Equal(t0.Add(39*time.Minute)) {
		t.Fatalf("paged %d alerts from %v to %v", len(paged), paged[0].Start, paged[len(paged)-1].Start)
	}
	if as, _, _ := e.Query(Filter{State: Resolved}); len(as) != 0 {
		t.Fatalf("%d resolved", len(as))
	}
	if _, _, err := e.Query(Filter{Cursor: "!!"}); !errors.Is(err, ErrBadCursor) {
		t.Fatalf("bad cursor: %v", err)
	}
	if _, _, err := e.Query(Filter{Limit: MaxQueryLimit + 1}); err == nil {
		t.Fatal("limit over the maximum accepted")
	}
}

func TestMaxAlertsEvictsResolvedFirst(t *testing.T) {
	e := newEval(t, mustRules(t, `rules: [{name: s, kind: sequence, first: {metric: a}, then: {metric: b}, within: 1m}]`), Options{MaxAlerts: 10})
	for i := range 20 {
		e.ObserveBatch(&aggregate.Batch{Device: "d", Events: []aggregate.Event{{Metric: "a", Time: at(time.Duration(i) * time.Minute)}, {Metric: "b", Time: at(time.Duration(i)*time.Minute + time.Second)}}})
	}
	if s := e.Stats(); s.Alerts != 10 || s.Evicted != 10 {
		t.Fatalf("stats %+v", s)
	}
	if _, ok := e.Get(alertID("s", "device=d", at(19*time.Minute))); !ok {
		t.Fatal("newest alert evicted")
	}
}

func TestBroadcastDropsSlowSubscriber(t *testing.T) {
	var b Broadcast
	fast, slow := b.Subscribe(10), b.Subscribe(1)
	b.Publish([]Alert{{ID: "a"}, {ID: "b"}})
	if !slow.Dropped() || fast.Dropped() {
		t.Fatalf("dropped: slow %v fast %v", slow.Dropped(), fast.Dropped())
	}
	if _, ok := <-slow.Alerts(); !ok {
		t.Fatal("the buffered alert is lost")
	}
	if _, ok := <-slow.Alerts(); ok {
		t.Fatal("dropped channel still open")
	}
	if a := <-fast.Alerts(); a.ID != "a" {
		t.Fatalf("got %v", a)
	}
	fast.Close()
	fast.Close()
	b.Publish([]Alert{{ID: "c"}})
}
