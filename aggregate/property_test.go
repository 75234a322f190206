package aggregate

import (
	"bytes"
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// genEvent is one generated event with its stream.
type genEvent struct {
	dev    string
	stream int
	Event
}

// genFleet generates events of several devices and streams over 40
// minutes: mostly in order per stream with some jitter, values multiples
// of 1/8 (so sums are exact in any order), shared timestamps for ties.
func genFleet(r *rand.Rand) [][]genEvent {
	var streams [][]genEvent
	rooms := []string{"kitchen", "hall"}
	for s := 0; s < 6; s++ {
		dev := fmt.Sprintf("dev-%d", s%4) // devices 0 and 1 have two streams
		var evs []genEvent
		tm := time.Duration(r.IntN(60)) * time.Second
		for i := 0; i < 250; i++ {
			tm += time.Duration(r.IntN(20)) * time.Second // gaps up to 20 s, bursts of equal times
			if r.IntN(50) == 0 {
				tm += 2 * time.Minute // session breaks
			}
			jitter := time.Duration(r.IntN(3)) * time.Second
			evs = append(evs, genEvent{dev: dev, stream: s, Event: Event{
				Seq: uint64(i + 1), Metric: "m", Tags: []Tag{{"room", rooms[r.IntN(2)]}, {"noise", fmt.Sprint(r.IntN(3))}},
				Value: float64(r.IntN(801)-400) / 8, Time: at(tm - jitter),
			}})
		}
		streams = append(streams, evs)
	}
	return streams
}

// deliver splits each stream into random chunks and interleaves them in a
// random order, as redelivery and reconnects would; server times follow
// delivery order.
func deliver(r *rand.Rand, streams [][]genEvent) []*Batch {
	var chunks [][]genEvent
	for _, evs := range streams {
		for i := 0; i < len(evs); {
			n := 1 + r.IntN(40)
			chunks = append(chunks, evs[i:min(i+n, len(evs))])
			i += n
		}
	}
	r.Shuffle(len(chunks), func(i, j int) { chunks[i], chunks[j] = chunks[j], chunks[i] })
	var out []*Batch
	for i, c := range chunks {
		b := &Batch{Seq: uint64(i + 1), Device: c[0].dev, Stream: sid(c[0].stream), ServerTime: at(time.Duration(i) * time.Second)}
		for _, ge := range c {
			b.Events = append(b.Events, ge.Event)
		}
		out = append(out, b)
	}
	return out
}

func propOptions() Options {
	o := testOptions()
	o.TagKeys = []string{"room"}
	o.LateHorizon = 1000 * time.Hour
	return o
}

var propSpecs = []WindowSpec{
	{Kind: Tumbling, Size: 10 * time.Second}, // one partial per window: stored quantiles
	{Kind: Tumbling, Size: time.Minute},
	{Kind: Hopping, Size: 5 * time.Minute, Slide: time.Minute},
	{Kind: Sliding, Size: 30 * time.Second},
	{Kind: Session, Gap: 40 * time.Second},
}

var propGroups = [][]string{nil, {"device"}, {"room"}, {"device", "room"}}

// runAll applies batches to a fresh engine, then lets every window become
// final.
func runAll(t testing.TB, opt Options, batches []*Batch) *Engine {
	e := applyAll(t, opt, batches)
	e.Tick()
	return e
}

// applyAll applies batches to a fresh engine whose clock is far ahead.
func applyAll(t testing.TB, opt Options, batches []*Batch) *Engine {
	clk := &fakeClock{now: t0.Add(1000 * time.Hour)}
	opt.Clock = clk.Now
	e := newEngine(t, opt)
	for _, b := range batches {
		if err := e.Apply(b); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// aggregatesOnly drops what depends on arrival order (lateness).
func aggregatesOnly(ws []WindowResult) []WindowResult {
	out := slices.Clone(ws)
	for i := range out {
		out[i].Late, out[i].Revision, out[i].Behind = 0, 0, 0
	}
	return out
}

func allQueries() []Query {
	var qs []Query
	for _, s := range propSpecs {
		for _, g := range propGroups {
			qs = append(qs, Query{Metric: "m", Window: s, GroupBy: g, From: t0.Add(-time.Hour), To: t0.Add(3 * time.Hour)})
		}
	}
	return qs
}

// TestOrderAndBatchingIndependence: the same events in different
// batchings and delivery orders give identical final aggregates.
func TestOrderAndBatchingIndependence(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	streams := genFleet(r)
	want := runAll(t, propOptions(), deliver(r, streams))
	for trial := 0; trial < 5; trial++ {
		got := runAll(t, propOptions(), deliver(r, streams))
		for _, q := range allQueries() {
			a, b := aggregatesOnly(mustQuery(t, want, q)), aggregatesOnly(mustQuery(t, got, q))
			if d := diffResults(a, b); d != "" {
				t.Fatalf("trial %d, %v group_by %v: %s", trial, q.Window, q.GroupBy, d)
			}
		}
	}
}

func diffResults(a, b []WindowResult) string {
	if len(a) != len(b) {
		return fmt.Sprintf("%d windows vs %d", len(a), len(b))
	}
	for i := range a {
		if fmt.Sprint(a[i]) != fmt.Sprint(b[i]) {
			return fmt.Sprintf("window %d:\n %+v\n %+v", i, a[i], b[i])
		}
	}
	return ""
}

// bruteWindow is a window computed from raw events.
type bruteWindow struct {
	start, end int64
	group      string
	vals       []float64
	last       genEvent
}

func groupKey(ge genEvent, groupBy []string) string {
	k := ""
	for _, g := range groupBy {
		switch g {
		case "device":
			k += ge.dev + "|"
		case "room":
			k += ge.Tags[0].Value + "|"
		}
	}
	return k
}

func laterThan(a, b genEvent) bool {
	sa, sb := sid(a.stream), sid(b.stream)
	return cmp.Or(cmp.Compare(a.Time, b.Time), cmp.Compare(a.dev, b.dev),
		bytes.Compare(sa[:], sb[:]), cmp.Compare(a.Seq, b.Seq)) > 0
}

// brute computes the windows of q from raw events.
func brute(streams [][]genEvent, q Query) map[string]*bruteWindow {
	out := map[string]*bruteWindow{}
	add := func(ge genEvent, s, e int64) {
		k := fmt.Sprint(s, "/", groupKey(ge, q.GroupBy))
		w := out[k]
		if w == nil {
			w = &bruteWindow{start: s, end: e, group: groupKey(ge, q.GroupBy), last: ge}
			out[k] = w
		}
		w.vals = append(w.vals, ge.Value)
		if laterThan(ge, w.last) {
			w.last = ge
		}
	}
	var all []genEvent
	for _, s := range streams {
		all = append(all, s...)
	}
	if q.Window.Kind == Session {
		bruteSessions(all, q, add)
		return out
	}
	spec := q.Window.normalize(10 * time.Second)
	size, slide := int64(spec.Size), int64(spec.Slide)
	for _, ge := range all {
		for s := floorDiv(ge.Time, slide) * slide; s > ge.Time-size; s -= slide {
			add(ge, s, s+size)
		}
	}
	return out
}

func bruteSessions(all []genEvent, q Query, add func(genEvent, int64, int64)) {
	byGroup := map[string][]genEvent{}
	for _, ge := range all {
		k := groupKey(ge, q.GroupBy)
		byGroup[k] = append(byGroup[k], ge)
	}
	gap := int64(q.Window.Gap)
	for _, evs := range byGroup {
		slices.SortFunc(evs, func(a, b genEvent) int { return cmp.Compare(a.Time, b.Time) })
		for i := 0; i < len(evs); {
			j := i + 1
			for j < len(evs) && evs[j].Time-evs[j-1].Time < gap {
				j++
			}
			for _, ge := range evs[i:j] {
				add(ge, evs[i].Time, evs[j-1].Time+gap)
			}
			i = j
		}
	}
}

// TestAgainstBruteForce checks every aggregate of every window kind and
// grouping against a brute-force computation: exact for count, sum, min,
// max, avg and last; quantiles within the sketch's relative accuracy.
func TestAgainstBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	streams := genFleet(r)
	opt := propOptions()
	e := runAll(t, opt, deliver(r, streams))
	for _, q := range allQueries() {
		got := mustQuery(t, e, q)
		want := brute(streams, q)
		if len(got) != len(want) {
			t.Fatalf("%v group_by %v: %d windows, brute force %d", q.Window, q.GroupBy, len(got), len(want))
		}
		for _, w := range got {
			key := ""
			for _, g := range q.GroupBy {
				key += w.Group[g] + "|"
			}
			b := want[fmt.Sprint(w.Start.UnixNano(), "/", key)]
			if b == nil || b.end != w.End.UnixNano() {
				t.Fatalf("%v group_by %v: unexpected window %+v", q.Window, q.GroupBy, w)
			}
			checkWindow(t, q, w, b, e.Options().SketchAccuracy)
		}
	}
}

func checkWindow(t *testing.T, q Query, w WindowResult, b *bruteWindow, acc float64) {
	t.Helper()
	vals := slices.Clone(b.vals)
	slices.Sort(vals)
	sum := 0.0
	for _, v := range vals {
		sum += v
	}
	n := float64(len(vals))
	if w.Count != uint64(len(vals)) || w.Sum != sum || w.Min != vals[0] || w.Max != vals[len(vals)-1] ||
		w.Avg != sum/n || w.Last != b.last.Value || w.LastTime.UnixNano() != b.last.Time || !w.Final {
		t.Fatalf("%v %v: got %+v, want count %d sum %v min %v max %v last %v@%v", q.Window, q.GroupBy, w,
			len(vals), sum, vals[0], vals[len(vals)-1], b.last.Value, b.last.Time)
	}
	for _, c := range []struct {
		q   float64
		got float64
	}{{0.5, w.P50}, {0.95, w.P95}, {0.99, w.P99}} {
		// DDSketch picks the element at rank floor(q(n-1)) among positive
		// values and ceil(q(n-1)) among negative ones.
		rank := c.q * (n - 1)
		lo, hi := vals[int(math.Floor(rank))], vals[int(math.Ceil(rank))]
		truth := lo
		if math.Abs(c.got-hi) < math.Abs(c.got-lo) {
			truth = hi
		}
		if math.Abs(c.got-truth) > acc*math.Abs(truth)+1e-9 {
			t.Fatalf("%v %v: p%v = %v, true %v, beyond relative accuracy %v", q.Window, q.GroupBy, c.q*100, c.got, truth, acc)
		}
	}
}
