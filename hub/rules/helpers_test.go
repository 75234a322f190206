package rules

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
	"time"

	"edgeflow/aggregate"
)

// t0 is a round base time (a multiple of every window the tests use).
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(d time.Duration) int64 { return t0.Add(d).UnixNano() }

type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time { return c.now }

// tev is one test event of a device.
type tev struct {
	dev    string
	metric string
	v      float64
	t      int64
}

func mustRules(t testing.TB, yaml string) []Rule {
	t.Helper()
	rs, err := ParseYAML([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func newEval(t testing.TB, rs []Rule, opt Options) *Evaluator {
	t.Helper()
	e, err := New(rs, opt)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// deliveries splits events into batches per device in a shuffled order;
// with dup > 0 some batches are delivered again (as a redelivery the
// evaluator sees when it is fed before the hub's dedup).
func deliveries(r *rand.Rand, evs []tev, dup float64) [][]tev {
	sh := slices.Clone(evs)
	r.Shuffle(len(sh), func(i, j int) { sh[i], sh[j] = sh[j], sh[i] })
	var out [][]tev
	for len(sh) > 0 {
		n := min(len(sh), 1+r.IntN(8))
		chunk := sh[:n]
		sh = sh[n:]
		byDev := map[string][]tev{}
		for _, e := range chunk {
			byDev[e.dev] = append(byDev[e.dev], e)
		}
		for _, d := range slices.Sorted(mapsKeys(byDev)) {
			out = append(out, byDev[d])
			if r.Float64() < dup {
				out = append(out, byDev[d])
			}
		}
	}
	return out
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func batchOf(evs []tev, seq map[string]uint64, server int64) *aggregate.Batch {
	b := &aggregate.Batch{Device: evs[0].dev, ServerTime: server}
	copy(b.Stream[:], evs[0].dev)
	for _, e := range evs {
		seq[e.dev]++
		b.Events = append(b.Events, aggregate.Event{Seq: seq[e.dev], Metric: e.metric, Value: e.v, Time: e.t})
	}
	return b
}

// alertSet is the alerts of one state as id -> alert.
func alertSet(t testing.TB, e *Evaluator, state State) map[string]Alert {
	t.Helper()
	out := map[string]Alert{}
	cursor := ""
	for {
		as, next, err := e.Query(Filter{State: state, Limit: 1000, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range as {
			out[a.ID] = a
		}
		if next == "" {
			return out
		}
		cursor = next
	}
}

func sortedIDs[V any](m map[string]V) []string {
	ids := make([]string, 0, len(m))
	for k := range m {
		ids = append(ids, k)
	}
	sort.Strings(ids)
	return ids
}

// checkFiring compares the evaluator's firing alerts with want and checks
// that no resolved alert is in want. The value of an open silence is the
// silence known when it fired, so it is not compared.
func checkFiring(t testing.TB, e *Evaluator, want map[string]Alert, cmpValue bool) {
	t.Helper()
	got := alertSet(t, e, Firing)
	if fmt.Sprint(sortedIDs(got)) != fmt.Sprint(sortedIDs(want)) {
		t.Fatalf("firing:\n got  %v\n want %v", sortedIDs(got), sortedIDs(want))
	}
	for id, w := range want {
		g := got[id]
		if !g.End.Equal(w.End) || cmpValue && !w.End.IsZero() && !near(g.Value, w.Value) {
			t.Fatalf("alert %s: got end %v value %v, want end %v value %v", id, g.End, g.Value, w.End, w.Value)
		}
	}
	for id := range alertSet(t, e, Resolved) {
		if _, ok := want[id]; ok {
			t.Fatalf("alert %s resolved, want firing", id)
		}
	}
}

func near(a, b float64) bool {
	d := a - b
	return d < 1e-9 && d > -1e-9 || d/b < 1e-9 && d/b > -1e-9
}

// TestResultIDMatchesAlertID: the scratch-built id of a window result is
// alertID of its group, with and without grouping.
func TestResultIDMatchesAlertID(t *testing.T) {
	res := &aggregate.WindowResult{Group: map[string]string{"device": "d7", "room": "k"}}
	for _, gb := range [][]string{nil, {"device"}, {"room", "device"}, {"metric"}} {
		r := &Rule{Name: "r1", GroupBy: gb}
		if got, want := string(appendResultID(nil, r, res, -42)), alertID(r.Name, resultGroup(gb, res.Group), -42); got != want {
			t.Fatalf("group_by %v: %q, want %q", gb, got, want)
		}
	}
}
