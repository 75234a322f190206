package aggregate

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// memAttrs is an attribute table for tests, copy on write like the hub's.
type memAttrs struct{ dev map[string][]AttrVersion }

func (m *memAttrs) AttrVersions(d string) []AttrVersion { return m.dev[d] }

func (m *memAttrs) put(d string, v AttrVersion) {
	old := m.dev[d]
	i, found := slices.BinarySearchFunc(old, v.From, func(a AttrVersion, t int64) int { return int(max(min(a.From-t, 1), -1)) })
	vs := append(slices.Clone(old[:i]), v)
	if found {
		i++
	}
	m.dev[d] = append(vs, old[i:]...)
}

// genVersions draws a random history per device: versions at random
// bucket starts (10 s) from an hour before the events to their end.
func genVersions(r *rand.Rand, devices []string) map[string][]AttrVersion {
	sites := []string{"north", "south", "east"}
	out := map[string][]AttrVersion{}
	for _, d := range devices {
		n := r.IntN(6)
		for i := 0; i < n; i++ {
			from := at(time.Duration(r.IntN(600)-360) * 10 * time.Second)
			attrs := map[string]string{"site": sites[r.IntN(len(sites))]}
			if r.IntN(3) == 0 {
				attrs["model"] = fmt.Sprint("x", r.IntN(2))
			}
			out[d] = append(out[d], AttrVersion{From: from, Attrs: attrs})
		}
	}
	return out
}

// bruteAttr computes count and sum by window and group of q, joining each
// event with the version in force at its event time.
func bruteAttr(streams [][]genEvent, table map[string][]AttrVersion, q Query) map[string][2]float64 {
	size := int64(q.Window.Size)
	slide := int64(q.Window.Slide)
	if slide == 0 {
		slide = size
	}
	out := map[string][2]float64{}
	for _, s := range streams {
		for _, ge := range s {
			attrs := AttrAt(table[ge.dev], ge.Time)
			if !attrsMatch(attrs, q.AttrFilter) {
				continue
			}
			var g []string
			for _, d := range q.GroupBy {
				switch {
				case d == "device":
					g = append(g, ge.dev)
				case d == "room":
					g = append(g, ge.Tags[0].Value)
				case strings.HasPrefix(d, AttrPrefix):
					g = append(g, attrs[strings.TrimPrefix(d, AttrPrefix)])
				}
			}
			for st := floorDiv(ge.Time, slide) * slide; st > ge.Time-size; st -= slide {
				k := fmt.Sprint(st, "|", strings.Join(g, "|"))
				c := out[k]
				out[k] = [2]float64{c[0] + 1, c[1] + ge.Value}
			}
		}
	}
	return out
}

func resultsByKey(ws []WindowResult, groupBy []string) map[string][2]float64 {
	out := map[string][2]float64{}
	for _, w := range ws {
		var g []string
		for _, d := range groupBy {
			g = append(g, w.Group[d])
		}
		out[fmt.Sprint(w.Start.UnixNano(), "|", strings.Join(g, "|"))] = [2]float64{float64(w.Count), w.Sum}
	}
	return out
}

// TestAttrJoinProperty: random version histories, written at random
// points among shuffled batches (so many are retroactive corrections),
// give the brute-force join of every event with the version in force at
// its event time, for every grouping and filter.
func TestAttrJoinProperty(t *testing.T) {
	for seed := uint64(1); seed <= 6; seed++ {
		r := rand.New(rand.NewPCG(seed, 7))
		streams := genFleet(r)
		writes := genVersions(r, []string{"dev-0", "dev-1", "dev-2", "dev-3"})
		batches := deliver(r, streams)
		clk := &fakeClock{now: t0.Add(1000 * time.Hour)}
		opt := propOptions()
		opt.Clock = clk.Now
		e := newEngine(t, opt)
		tab := &memAttrs{dev: map[string][]AttrVersion{}}
		e.SetAttrSource(tab)
		type write struct {
			dev string
			v   AttrVersion
		}
		var pend []write
		for d, vs := range writes {
			for _, v := range vs {
				pend = append(pend, write{d, v})
			}
		}
		slices.SortFunc(pend, func(a, b write) int { return strings.Compare(a.dev, b.dev) })
		r.Shuffle(len(pend), func(i, j int) { pend[i], pend[j] = pend[j], pend[i] })
		for i, b := range batches {
			for len(pend) > 0 && r.IntN(len(batches)) < 3 {
				tab.put(pend[0].dev, pend[0].v)
				e.ReviseDevice(pend[0].dev, pend[0].v, pend[0].v.From, pend[0].v.From+1, uint64(1000+i))
				pend = pend[1:]
			}
			if err := e.Apply(b); err != nil {
				t.Fatal(err)
			}
		}
		for _, w := range pend {
			tab.put(w.dev, w.v)
		}
		e.Tick()
		final := tab.dev
		queries := []Query{
			{GroupBy: []string{"attr.site"}},
			{GroupBy: []string{"attr.site", "device"}},
			{GroupBy: []string{"room", "attr.model"}},
			{GroupBy: []string{"metric", "attr.site"}, AttrFilter: map[string]string{"model": "x1"}},
			{AttrFilter: map[string]string{"site": "north"}},
		}
		for _, spec := range []WindowSpec{{Kind: Tumbling, Size: 10 * time.Second}, {Kind: Tumbling, Size: time.Minute}, {Kind: Hopping, Size: 5 * time.Minute, Slide: time.Minute}} {
			for _, q := range queries {
				q.Metric, q.Window, q.From, q.To = "m", spec, t0.Add(-time.Hour), t0.Add(3*time.Hour)
				want := bruteAttr(streams, final, q)
				gb := slices.Clone(q.GroupBy)
				if slices.Contains(gb, "metric") {
					// brute has no metric dimension: one metric, "m"
					gb = slices.DeleteFunc(gb, func(s string) bool { return s == "metric" })
				}
				got := resultsByKey(mustQuery(t, e, q), gb)
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("seed %d %v group_by %v filter %v:\n got %v\nwant %v", seed, spec, q.GroupBy, q.AttrFilter, got, want)
				}
			}
		}
	}
}

// TestAttrReviseMarksFinalWindows: a retroactive version revises the
// final windows of the device it covers (revision bumped, a revised and
// an attributes update announced), not other devices'; a replayed
// revision at a position a stored partial holds is skipped.
func TestAttrReviseMarksFinalWindows(t *testing.T) {
	clk := &fakeClock{now: t0}
	opt := testOptions()
	opt.Clock = clk.Now
	e := newEngine(t, opt)
	tab := &memAttrs{dev: map[string][]AttrVersion{}}
	e.SetAttrSource(tab)
	v0 := AttrVersion{From: at(0), Attrs: map[string]string{"site": "a"}}
	tab.put("d1", v0)
	mustApply(t, e, batchOf("d2", 2, at(time.Minute), ev{1, "m", nil, 4, at(5 * time.Second)}))
	mustApply(t, e, batchOf("d1", 1, at(time.Minute), ev{1, "m", nil, 1, at(5 * time.Second)}, ev{2, "m", nil, 2, at(75 * time.Second)}))
	clk.now = t0.Add(time.Hour)
	mustApply(t, e, batchOf("d1", 1, at(time.Hour), ev{3, "m", nil, 3, at(time.Hour)}))
	mustApply(t, e, batchOf("d2", 2, at(time.Hour), ev{2, "m", nil, 3, at(time.Hour)}))
	e.Tick()
	sub := e.Subscribe(64)
	defer sub.Close()
	v1 := AttrVersion{From: at(time.Minute), Attrs: map[string]string{"site": "b"}}
	tab.put("d1", v1)
	marked, skipped := e.ReviseDevice("d1", v1, v1.From, at(time.Hour), 99)
	if marked != 1 || skipped != 0 {
		t.Fatalf("marked %d skipped %d, want the one bucket of d1 in [1m, 1h)", marked, skipped)
	}
	q := Query{Metric: "m", Window: WindowSpec{Kind: Tumbling, Size: time.Minute}, GroupBy: []string{"attr.site", "device"}, From: t0, To: t0.Add(2 * time.Minute)}
	res := mustQuery(t, e, q)
	got := map[string]string{}
	for _, w := range res {
		got[w.Start.Sub(t0).String()+" "+w.Group["device"]+" "+w.Group["attr.site"]] = fmt.Sprintf("n=%d rev=%d", w.Count, w.Revision)
	}
	want := map[string]string{"0s d1 a": "n=1 rev=0", "1m0s d1 b": "n=1 rev=1", "0s d2 ": "n=1 rev=0"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	var kinds []string
	for len(sub.Updates()) > 0 {
		u := <-sub.Updates()
		kinds = append(kinds, u.Kind.String())
		if u.Kind == UpdateAttributes && (u.Device != "d1" || u.Attrs["site"] != "b" || !u.Start.Equal(t0.Add(time.Minute))) {
			t.Fatalf("attributes update %+v", u)
		}
	}
	if !slices.Contains(kinds, "attributes") || !slices.Contains(kinds, "revised") {
		t.Fatalf("updates %v: want attributes and revised", kinds)
	}
}

// TestAttrQueriesRefused: without a table, attribute dimensions are
// refused (queries and exported partials), and an empty key, with the
// parameter named.
func TestAttrQueriesRefused(t *testing.T) {
	e := newEngine(t, testOptions())
	mustApply(t, e, batchOf("d1", 1, at(time.Minute), ev{1, "m", nil, 1, at(5 * time.Second)}))
	q := Query{Metric: "m", Window: WindowSpec{Kind: Tumbling, Size: time.Minute}, GroupBy: []string{"attr.site"}, From: t0, To: t0.Add(time.Hour)}
	if _, err := e.Query(q); err == nil || !strings.Contains(err.Error(), "attribute table") {
		t.Fatalf("no table: %v", err)
	}
	if _, err := e.ExportPartials(q); err == nil || !strings.Contains(err.Error(), "attribute table") {
		t.Fatalf("partials without a table: %v", err)
	}
	e.SetAttrSource(&memAttrs{dev: map[string][]AttrVersion{}})
	q.GroupBy = []string{"attr."}
	if _, err := e.Query(q); err == nil || !strings.Contains(err.Error(), "group_by") {
		t.Fatalf("empty key: %v", err)
	}
}

// TestVersionAt: versionAt finds the version AttrAt finds, from any hint
// (partials in order, out of order, and far past the hint).
func TestVersionAt(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 5))
	for n := 0; n < 40; n++ {
		var vs []AttrVersion
		for from := int64(r.IntN(5)); len(vs) < n; from += 1 + int64(r.IntN(3)) {
			vs = append(vs, AttrVersion{From: from, Attrs: map[string]string{"v": fmt.Sprint(len(vs))}})
		}
		hint := -1
		for k := 0; k < 200; k++ {
			tm := int64(r.IntN(3*n+10)) - 3
			if r.IntN(4) == 0 {
				hint = r.IntN(n+3) - 2 // any hint, valid or not
			}
			got := versionAt(vs, tm, hint)
			want := AttrAt(vs, tm)
			if got < -1 || got >= len(vs) || (got == -1) != (want == nil) || got >= 0 && vs[got].Attrs["v"] != want["v"] {
				t.Fatalf("%d versions, t %d, hint %d: index %d, AttrAt %v", n, tm, hint, got, want)
			}
			hint = got
		}
	}
}

// TestAttrPartialSetsMerge: two hubs, each holding half the devices and
// the attribute versions of its own devices, export partial sets grouped
// by attribute dimensions (and filtered); the merged sets answer every
// window kind and every coarser grouping exactly as one engine holding
// everything answers its own attribute query: counts, sums, min, max,
// last, quantiles, Final and Behind. A set merged into a query with
// another filter, or none, is refused naming attr.
func TestAttrPartialSetsMerge(t *testing.T) {
	exports := []struct {
		groupBy []string
		filter  map[string]string
	}{
		{[]string{"attr.site", "device"}, nil},
		{[]string{"attr.site", "room"}, nil},
		{[]string{"attr.site", "attr.model"}, nil},
		{[]string{"attr.site"}, map[string]string{"model": "x1"}},
		{[]string{"device"}, map[string]string{"site": "north"}},
	}
	windows := make([]int, len(exports)) // compared, per export
	for seed := uint64(1); seed <= 3; seed++ {
		r := rand.New(rand.NewPCG(seed, 41))
		streams := genFleet(r)
		versions := genVersions(r, []string{"dev-0", "dev-1", "dev-2", "dev-3"})
		batches := deliver(r, streams)
		half1, half2 := splitByDevice(batches)
		table := func(batches []*Batch) *memAttrs {
			tab := &memAttrs{dev: map[string][]AttrVersion{}}
			for _, b := range batches {
				if _, done := tab.dev[b.Device]; done {
					continue
				}
				tab.dev[b.Device] = nil
				for _, v := range versions[b.Device] {
					tab.put(b.Device, v)
				}
			}
			return tab
		}
		opt := propOptions()
		opt.TagKeys = nil
		all, hubA, hubB := runAll(t, opt, batches), runAll(t, opt, half1), runAll(t, opt, half2)
		all.SetAttrSource(table(batches))
		hubA.SetAttrSource(table(half1))
		hubB.SetAttrSource(table(half2))
		for i, ex := range exports {
			export := func(e *Engine) *PartialSet {
				ps, err := e.ExportPartials(Query{Metric: "m", From: t0.Add(-2 * time.Hour), To: t0.Add(30 * time.Hour),
					GroupBy: ex.groupBy, AttrFilter: ex.filter})
				if err != nil {
					t.Fatal(err)
				}
				b, err := ps.MarshalBinary()
				if err != nil {
					t.Fatal(err)
				}
				back, err := DecodePartialSet(b)
				if err != nil {
					t.Fatal(err)
				}
				return back
			}
			sets := []*PartialSet{export(hubA), export(hubB)}
			merged := 0
			for _, spec := range propSpecs {
				for mask := 0; mask < 1<<len(ex.groupBy); mask++ {
					// the export's grouping and every coarser one
					var gb []string
					for i, d := range ex.groupBy {
						if mask&(1<<i) != 0 {
							gb = append(gb, d)
						}
					}
					q := Query{Metric: "m", Window: spec, GroupBy: gb, AttrFilter: ex.filter,
						From: t0.Add(-time.Hour), To: t0.Add(3 * time.Hour)}
					got, err := QueryPartials(sets, q)
					if err != nil {
						t.Fatal(err)
					}
					want := mustQuery(t, all, q)
					windows[i] += len(want)
					if d := diffResults(withoutLateness(want), withoutLateness(got)); d != "" {
						t.Fatalf("seed %d, exported by %v filter %v, %v group_by %v: %s", seed, ex.groupBy, ex.filter, spec, q.GroupBy, d)
					}
					merged++
				}
			}
			other := map[string]string{"site": "south"}
			if ex.filter == nil {
				other = nil
			}
			for _, f := range []map[string]string{other, {"site": "east"}} {
				if fmt.Sprint(f) == fmt.Sprint(ex.filter) {
					continue
				}
				q := Query{Metric: "m", Window: propSpecs[1], GroupBy: ex.groupBy, AttrFilter: f, From: t0, To: t0.Add(time.Hour)}
				var pe *ParamError
				if _, err := QueryPartials(sets, q); !errors.As(err, &pe) || pe.Param != "attr" {
					t.Fatalf("sets filtered by %v merged into a query filtered by %v: %v, want a ParamError for attr", ex.filter, f, err)
				}
			}
			t.Logf("seed %d, exported by %v filter %v: %d merged queries equal the engine's", seed, ex.groupBy, ex.filter, merged)
		}
	}
	for i, n := range windows {
		if n == 0 {
			t.Errorf("exported by %v filter %v: no window compared in any seed", exports[i].groupBy, exports[i].filter)
		}
	}
}
