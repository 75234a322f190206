package aggregate

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// splitByDevice gives the batches of even devices to one hub and of odd
// devices to the other, as a partition of the fleet would: each batch
// keeps its server time.
func splitByDevice(batches []*Batch) (a, b []*Batch) {
	for _, bt := range batches {
		if strings.HasSuffix(bt.Device, "0") || strings.HasSuffix(bt.Device, "2") {
			a = append(a, bt)
		} else {
			b = append(b, bt)
		}
	}
	return a, b
}

// exported exports and round-trips one engine's partials of metric m.
func exported(t *testing.T, e *Engine, groupBy []string) *PartialSet {
	t.Helper()
	ps, err := e.ExportPartials(Query{Metric: "m", From: t0.Add(-2 * time.Hour), To: t0.Add(30 * time.Hour), GroupBy: groupBy})
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

// withoutLateness drops what depends on each hub's arrival history.
func withoutLateness(ws []WindowResult) []WindowResult {
	out := slices.Clone(ws)
	for i := range out {
		out[i].Late, out[i].Revision = 0, 0
	}
	return out
}

// TestMergeTwoHubs: two hubs, each fed the streams of half the devices,
// merged through their exported partial sets, answer every window kind
// and grouping exactly as one hub fed everything: counts, sums, min, max,
// avg, last, quantiles (sketch bins add exactly), Final and Behind.
func TestMergeTwoHubs(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	batches := deliver(r, genFleet(r))
	half1, half2 := splitByDevice(batches)
	opt := propOptions()
	opt.TagKeys = nil // group by any tag
	all := runAll(t, opt, batches)
	hubA := runAll(t, opt, half1)
	hubB := runAll(t, opt, half2)
	for _, exportGroups := range [][]string{{"device", "room"}, {"room"}, nil} {
		sets := []*PartialSet{exported(t, hubA, exportGroups), exported(t, hubB, exportGroups)}
		for _, q := range allQueries() {
			if !isSubset(q.GroupBy, exportGroups) {
				continue
			}
			got, err := QueryPartials(sets, q)
			if err != nil {
				t.Fatal(err)
			}
			want := mustQuery(t, all, q)
			if d := diffResults(withoutLateness(want), withoutLateness(got)); d != "" {
				t.Fatalf("exported by %v, %v group_by %v: %s", exportGroups, q.Window, q.GroupBy, d)
			}
		}
	}
}

func isSubset(a, b []string) bool {
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}

// TestPartialSetErrors: mismatched sets, a group_by the sets lack and
// corrupt bytes are refused with errors that say what is wrong.
func TestPartialSetErrors(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	e := runAll(t, propOptions(), deliver(r, genFleet(r)))
	ps := exported(t, e, []string{"room"})
	q := Query{Metric: "m", Window: WindowSpec{Kind: Tumbling, Size: time.Minute}, From: t0, To: t0.Add(time.Hour)}
	var pe *ParamError
	if _, err := QueryPartials([]*PartialSet{ps}, Query{Metric: "m", Window: q.Window, From: q.From, To: q.To, GroupBy: []string{"device"}}); !errors.As(err, &pe) || pe.Param != "group_by" {
		t.Fatalf("group_by outside the set: %v", err)
	}
	other := *ps
	other.Resolution = time.Minute
	if _, err := QueryPartials([]*PartialSet{ps, &other}, q); !errors.Is(err, ErrInvalidQuery) || !strings.Contains(err.Error(), "resolution") {
		t.Fatalf("mismatched resolution: %v", err)
	}
	b, _ := ps.MarshalBinary()
	for _, bad := range [][]byte{nil, []byte("EFPS"), b[:len(b)/2], append(slices.Clone(b), 0)} {
		if _, err := DecodePartialSet(bad); !errors.Is(err, ErrCorruptSnapshot) {
			t.Fatalf("corrupt set of %d bytes: %v", len(bad), err)
		}
	}
}

// FuzzDecodePartialSet: no input makes the decoder panic or allocate
// beyond its length; what it accepts encodes back to the same bytes.
func FuzzDecodePartialSet(f *testing.F) {
	r := rand.New(rand.NewPCG(25, 26))
	e := runAll(f, propOptions(), deliver(r, genFleet(r)))
	ps, err := e.ExportPartials(Query{Metric: "m", From: t0, To: t0.Add(10 * time.Minute), GroupBy: []string{"device"}})
	if err != nil {
		f.Fatal(err)
	}
	seed, _ := ps.MarshalBinary()
	f.Add(seed)
	ps.AttrFilter = map[string]string{"site": "north", "model": "x1"} // version 2
	seed, _ = ps.MarshalBinary()
	f.Add(seed)
	f.Fuzz(func(t *testing.T, b []byte) {
		ps, err := DecodePartialSet(b)
		if err != nil {
			return
		}
		if _, err := ps.MarshalBinary(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestKeepRestrictsToDevices: an engine holding every device, asked with
// Keep for half of them, answers (query, partial set, behind counts) as
// an engine that holds only that half; the two halves' sets merge into
// the whole fleet's answer. A hub of a cluster answers so for the
// partitions it owns while it still holds the state of one it lost.
func TestKeepRestrictsToDevices(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	batches := deliver(r, genFleet(r))
	half1, _ := splitByDevice(batches)
	inHalf1 := map[string]bool{}
	for _, b := range half1 {
		inHalf1[b.Device] = true
	}
	keep1 := func(d string) bool { return inHalf1[d] }
	keep2 := func(d string) bool { return !inHalf1[d] }
	opt := propOptions()
	opt.TagKeys = nil
	all := runAll(t, opt, batches)
	only1 := runAll(t, opt, half1)
	export := func(keep func(string) bool) *PartialSet {
		ps, err := all.ExportPartials(Query{Metric: "m", From: t0.Add(-2 * time.Hour), To: t0.Add(30 * time.Hour),
			GroupBy: []string{"device", "room"}, Keep: keep})
		if err != nil {
			t.Fatal(err)
		}
		return ps
	}
	for _, q := range allQueries() {
		kept := q
		kept.Keep = keep1
		if d := diffResults(mustQuery(t, only1, q), mustQuery(t, all, kept)); d != "" {
			t.Fatalf("%v group_by %v with Keep: %s", q.Window, q.GroupBy, d)
		}
		if !isSubset(q.GroupBy, []string{"device", "room"}) {
			continue
		}
		got, err := QueryPartials([]*PartialSet{export(keep1), export(keep2)}, q)
		if err != nil {
			t.Fatal(err)
		}
		if d := diffResults(withoutLateness(mustQuery(t, all, q)), withoutLateness(got)); d != "" {
			t.Fatalf("merged halves, %v group_by %v: %s", q.Window, q.GroupBy, d)
		}
	}
}

// TestExportedSetOutlivesEviction: a partial set shares nothing with the
// engine, so evicting (and recycling the sketches of) the partials it was
// exported from changes none of its answers. Without the copy, a group
// of one series aliased the live sketch, which eviction cleared.
func TestExportedSetOutlivesEviction(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 42))
	opt := propOptions()
	opt.TagKeys = nil
	opt.EvictAfter = time.Minute
	opt.Store = NewMemStore()
	clk := &fakeClock{now: t0}
	opt.Clock = clk.Now
	e := newEngine(t, opt)
	for _, b := range deliver(r, genFleet(r)) {
		mustApply(t, e, b)
	}
	ps := exported(t, e, []string{"device"})
	direct, err := e.ExportPartials(Query{Metric: "m", From: t0.Add(-2 * time.Hour), To: t0.Add(30 * time.Hour), GroupBy: []string{"device"}})
	if err != nil {
		t.Fatal(err)
	}
	q := Query{Metric: "m", Window: WindowSpec{Kind: Tumbling, Size: time.Minute}, From: t0.Add(-2 * time.Hour), To: t0.Add(30 * time.Hour),
		GroupBy: []string{"device"}}
	want, err := QueryPartials([]*PartialSet{ps}, q)
	if err != nil {
		t.Fatal(err)
	}
	clk.now = t0.Add(48 * time.Hour) // every partial final and past evict_after
	e.Tick()
	if s := e.Stats(); s.Evicted == 0 {
		t.Fatalf("nothing evicted: %+v", s)
	}
	got, err := QueryPartials([]*PartialSet{direct}, q)
	if err != nil {
		t.Fatal(err)
	}
	if d := diffResults(want, got); d != "" {
		t.Fatalf("the set exported before the eviction answers differently after it: %s", d)
	}
}
