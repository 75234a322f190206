package aggregate

import (
	"bytes"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// genDevices generates events of n devices (every third with two
// streams) over 40 minutes, as genFleet does for four.
func genDevices(r *rand.Rand, n int) [][]genEvent {
	var streams [][]genEvent
	rooms := []string{"kitchen", "hall"}
	s := 0
	for dv := range n {
		for k := 0; k <= min(dv%3, 1); k++ {
			dev := fmt.Sprintf("dev-%02d", dv)
			var evs []genEvent
			tm := time.Duration(r.IntN(60)) * time.Second
			for i := range 40 + r.IntN(80) {
				tm += time.Duration(r.IntN(40)) * time.Second
				jitter := time.Duration(r.IntN(3)) * time.Second
				evs = append(evs, genEvent{dev: dev, stream: s, Event: Event{
					Seq: uint64(i + 1), Metric: "m", Tags: []Tag{{"room", rooms[r.IntN(2)]}},
					Value: float64(r.IntN(801)-400) / 8, Time: at(tm - jitter),
				}})
			}
			streams = append(streams, evs)
			s++
		}
	}
	return streams
}

func partitionOf(device string, parts uint32) uint32 {
	h := fnv.New32a()
	h.Write([]byte(device))
	return h.Sum32() % parts
}

// moveDevices hands the devices sel selects from one engine to another:
// export, import, drop, as a partition handover does.
func moveDevices(t *testing.T, from, to *Engine, sel func(string) bool) {
	t.Helper()
	data, err := from.ExportDevices(sel)
	if err != nil {
		t.Fatal(err)
	}
	if err := to.ImportDevices(data); err != nil {
		t.Fatalf("import: %v", err)
	}
	if _, err := from.DropDevices(sel); err != nil {
		t.Fatalf("drop: %v", err)
	}
}

// TestHandoverSplitMerge: random events of random devices; two engines
// own the partitions of a random partition function, and at a random
// point one partition's devices move from its owner to the other engine
// (Export, Import, Drop) while both are live. At the end the cross-hub
// merge of the two engines' partial sets answers every window kind and
// grouping (group_by over all devices included) exactly as one engine fed
// everything: counts, sums, min, max, last, quantiles, Final and Behind.
// Half the runs tick the engines before the handover, so that every
// partial has been evicted to the store and the handover carries stored
// partials.
func TestHandoverSplitMerge(t *testing.T) {
	for seed := range uint64(12) {
		r := rand.New(rand.NewPCG(seed, 99))
		nDev := 4 + r.IntN(12)
		batches := deliver(r, genDevices(r, nDev))
		opt := propOptions()
		opt.TagKeys = nil
		clk := &fakeClock{now: t0.Add(1000 * time.Hour)}
		opt.Clock = clk.Now
		if seed%3 == 0 {
			opt.EvictAfter = time.Minute // eviction into the store while applying; late events reload
		}
		whole, hubs := newEngine(t, opt), []*Engine{newEngine(t, opt), newEngine(t, opt)}
		// Partitions, owners and the moving partition, such that both hubs
		// own a device after the move.
		var parts, moving uint32
		var owner []int
		devOwner := func(dev string) int { return owner[partitionOf(dev, parts)] }
		for {
			parts = uint32(2 + r.IntN(8))
			owner = make([]int, parts)
			for i := range owner {
				owner[i] = r.IntN(2)
			}
			moving = uint32(r.IntN(int(parts)))
			has := [2]bool{}
			for d := range nDev {
				dev := fmt.Sprintf("dev-%02d", d)
				o := devOwner(dev)
				if partitionOf(dev, parts) == moving {
					o = 1 - o
				}
				has[o] = true
			}
			if has[0] && has[1] {
				break
			}
		}
		cut := r.IntN(len(batches) + 1)
		apply := func(bs []*Batch) {
			for _, b := range bs {
				mustApply(t, whole, b)
				mustApply(t, hubs[devOwner(b.Device)], b)
			}
		}
		apply(batches[:cut])
		if seed%2 == 1 {
			for _, e := range append(hubs, whole) {
				e.Tick()
			}
		}
		sel := func(dev string) bool { return partitionOf(dev, parts) == moving }
		from := owner[moving]
		moveDevices(t, hubs[from], hubs[1-from], sel)
		owner[moving] = 1 - from
		for _, e := range hubs {
			if _, err := e.ExportDevices(sel); err != nil {
				t.Fatal(err)
			}
		}
		apply(batches[cut:])
		for _, e := range append(hubs, whole) {
			e.Tick()
		}
		for _, groups := range [][]string{{"device", "room"}, nil} {
			sets := []*PartialSet{exported(t, hubs[0], groups), exported(t, hubs[1], groups)}
			for _, q := range allQueries() {
				if !isSubset(q.GroupBy, groups) {
					continue
				}
				got, err := QueryPartials(sets, q)
				if err != nil {
					t.Fatal(err)
				}
				want := mustQuery(t, whole, q)
				if d := diffResults(withoutLateness(want), withoutLateness(got)); d != "" {
					for _, e := range append(hubs, whole) {
						t.Logf("%+v", e.Stats())
					}
					t.Fatalf("seed %d (cut %d of %d, tick %v): exported by %v, %v group_by %v: %s",
						seed, cut, len(batches), seed%2 == 1, groups, q.Window, q.GroupBy, d)
				}
			}
		}
		// Events counted once: the two hubs' windows hold every event.
		if got, want := eventsHeld(t, hubs[0])+eventsHeld(t, hubs[1]), eventsHeld(t, whole); got != want {
			t.Fatalf("seed %d: %d events in the two hubs, %d in one", seed, got, want)
		}
	}
}

func eventsHeld(t *testing.T, e *Engine) uint64 {
	var n uint64
	for _, w := range mustQuery(t, e, Query{Metric: "m", Window: WindowSpec{Kind: Tumbling, Size: time.Hour}, From: t0.Add(-2 * time.Hour), To: t0.Add(30 * time.Hour)}) {
		n += w.Count
	}
	return n
}

// TestHandoverRoundTrip: everything exported from one engine into an
// empty one answers every query exactly as the original, lateness and
// revisions included, and exports back to the same bytes; a second import
// is refused naming the device; after a drop of every device the engine
// answers nothing, and its snapshot (version 4, with dead series)
// restores to the same.
func TestHandoverRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	batches := deliver(r, genDevices(r, 9))
	opt := propOptions()
	clk := &fakeClock{now: t0.Add(1000 * time.Hour)}
	opt.Clock = clk.Now
	a := newEngine(t, opt)
	for i, b := range batches {
		mustApply(t, a, b)
		if i == len(batches)/2 {
			a.Tick() // everything so far goes to the store; later events are late
		}
	}
	all := func(string) bool { return true }
	data, err := a.ExportDevices(all)
	if err != nil {
		t.Fatal(err)
	}
	c := newEngine(t, opt)
	if err := c.ImportDevices(data); err != nil {
		t.Fatal(err)
	}
	if err := c.ImportDevices(data); !errors.Is(err, ErrDeviceHeld) || !strings.Contains(err.Error(), `"dev-00"`) {
		t.Fatalf("second import: %v, want ErrDeviceHeld naming dev-00", err)
	}
	again, err := c.ExportDevices(all)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again, data) {
		t.Fatal("export of the imported engine differs from the export it imported")
	}
	a.Tick()
	c.Tick()
	if ra, rc := fullResults(t, a), fullResults(t, c); ra != rc {
		t.Fatalf("answers after the round trip differ:\n%s\n%s", ra, rc)
	}
	sa, sc := a.Stats(), c.Stats()
	if sa.Series != sc.Series || sa.Streams != sc.Streams || sa.QuarantineHeld != sc.QuarantineHeld {
		t.Fatalf("stats differ: %+v\n%+v", sa, sc)
	}

	n, err := a.DropDevices(all)
	if err != nil || n != 9 {
		t.Fatalf("drop: %d devices, %v", n, err)
	}
	if got := eventsHeld(t, a); got != 0 {
		t.Fatalf("%d events answered after the drop", got)
	}
	if st := a.Stats(); st.Series != 0 || st.Streams != 0 || st.LivePartials != 0 {
		t.Fatalf("after the drop: %+v", st)
	}
	if ms, ok := a.opt.Store.(*MemStore); !ok || ms.Len() != 0 {
		t.Fatalf("store keeps partials after the drop")
	}
	snap, err := a.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	back := newEngine(t, opt)
	if err := back.Restore(snap); err != nil {
		t.Fatal(err)
	}
	if st := back.Stats(); st.Series != 0 || st.Streams != 0 {
		t.Fatalf("restored after the drop: %+v", st)
	}
	// The dropped devices may come back.
	if err := back.ImportDevices(data); err != nil {
		t.Fatalf("import after drop and restore: %v", err)
	}
	back.Tick()
	if rb, rc := fullResults(t, back), fullResults(t, c); rb != rc {
		t.Fatal("answers after drop, restore and import differ")
	}
}

// TestHandoverRejects: corrupt, truncated and incompatible exports are
// errors that leave the engine as it was.
func TestHandoverRejects(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	opt := propOptions()
	src := applyAll(t, opt, deliver(r, genDevices(r, 3)))
	src.Tick()
	data, err := src.ExportDevices(func(string) bool { return true })
	if err != nil {
		t.Fatal(err)
	}
	dst := newEngine(t, opt)
	mustApply(t, dst, batchOf("other", 77, at(time.Minute), ev{1, "m", nil, 1, at(time.Second)}))
	before := fullResults(t, dst)
	// Every prefix; in short mode (the race run) every one of the first
	// 2,000 bytes and about 1,000 spread over the rest.
	for i := 0; i < len(data); i++ {
		if testing.Short() && i > 2000 {
			i += r.IntN(max(1, len(data)/500))
			if i >= len(data) {
				break
			}
		}
		if err := dst.ImportDevices(data[:i]); !errors.Is(err, ErrCorruptSnapshot) {
			t.Fatalf("truncated at %d of %d: %v", i, len(data), err)
		}
	}
	if err := dst.ImportDevices(append(bytes.Clone(data), 0)); !errors.Is(err, ErrCorruptSnapshot) {
		t.Fatalf("trailing byte: %v", err)
	}
	for range 300 {
		bad := bytes.Clone(data)
		bad[r.IntN(len(bad))] ^= byte(1 + r.IntN(255))
		_ = dst.ImportDevices(bad) // must not panic
		_, _ = dst.DropDevices(func(d string) bool { return d != "other" })
	}
	o2 := opt
	o2.Resolution = 5 * time.Second
	if err := newEngine(t, o2).ImportDevices(data); !errors.Is(err, ErrIncompatibleSnapshot) {
		t.Fatalf("other resolution: %v", err)
	}
	if after := fullResults(t, dst); after != before {
		t.Fatal("refused imports changed the engine")
	}
	small := opt
	small.MaxSeries = 2
	if err := newEngine(t, small).ImportDevices(data); err == nil || !strings.Contains(err.Error(), "max_series") {
		t.Fatalf("beyond max_series: %v", err)
	}
}

// FuzzImportDevices: ImportDevices never panics, and what it accepts the
// engine answers queries over and exports again.
func FuzzImportDevices(f *testing.F) {
	r := rand.New(rand.NewPCG(4, 4))
	opt := propOptions()
	opt.StreamBuffer, opt.LateLogSize = 16, 16
	src := applyAll(f, opt, deliver(r, genDevices(r, 2)))
	data, err := src.ExportDevices(func(string) bool { return true })
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Add([]byte(handoverMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		e := newEngine(t, opt)
		if err := e.ImportDevices(b); err != nil {
			return
		}
		e.Tick()
		for _, q := range allQueries()[:4] {
			_, _ = e.Query(q)
		}
		if _, err := e.ExportDevices(func(string) bool { return true }); err != nil {
			t.Fatalf("export of an accepted import: %v", err)
		}
		if _, err := e.DropDevices(func(string) bool { return true }); err != nil {
			t.Fatal(err)
		}
	})
}

// TestRestoreVersion3Snapshot: a snapshot written before series had a
// dead flag (version 3) restores to the same state.
func TestRestoreVersion3Snapshot(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 3))
	opt := propOptions()
	e := applyAll(t, opt, deliver(r, genDevices(r, 3)))
	e.Tick()
	v4, err := e.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	enc := &encoder{}
	enc.b = append(enc.b, snapshotMagic...)
	enc.uvarint(3)
	enc.varint(e.res)
	enc.f64(e.opt.SketchAccuracy)
	e.encodeClock(enc)
	e.encodeStreams(enc)
	e.encodeSeriesVersion(enc, 3)
	e.encodeMerged(enc)
	e.encodeLateLog(enc)
	e.encodeQuarantine(enc)
	e.encodeStore(enc)
	back := newEngine(t, opt)
	if err := back.Restore(enc.b); err != nil {
		t.Fatal(err)
	}
	if got, _ := back.Snapshot(); !bytes.Equal(got, v4) {
		t.Fatal("a version 3 snapshot restores to a different state")
	}
	if fullResults(t, back) != fullResults(t, e) {
		t.Fatal("a version 3 snapshot answers differently")
	}
}

// TestHandoverImportAtRenumbers: partials exported from an engine whose
// log numbers its batches far beyond the importer's keep the exporter's
// numbers with ImportDevices, so a later batch of the importer's own log
// is skipped as a replay of a stored partial; ImportDevicesAt gives them
// the importer's position, and the batch is merged.
func TestHandoverImportAtRenumbers(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	batches := deliver(r, genDevices(r, 4))
	opt := propOptions()
	clk := &fakeClock{now: t0.Add(1000 * time.Hour)}
	opt.Clock = clk.Now
	a := newEngine(t, opt)
	for _, b := range batches {
		b.Seq += 1_000_000
		mustApply(t, a, b)
	}
	a.Tick() // every partial goes to the store
	data, err := a.ExportDevices(func(string) bool { return true })
	if err != nil {
		t.Fatal(err)
	}
	first, last := batches[0], batches[len(batches)-1]
	for _, tc := range []struct {
		at   uint64
		want uint64
	}{{0, 0}, {10, 1}} {
		c := newEngine(t, opt)
		if err := c.ImportDevicesAt(data, tc.at); err != nil {
			t.Fatal(err)
		}
		before := eventsHeld(t, c)
		ev := first.Events[0]
		mustApply(t, c, &Batch{Seq: 20, Device: first.Device, Stream: first.Stream, ServerTime: last.ServerTime + 1, Events: []Event{ev}})
		if got := eventsHeld(t, c) - before; got != tc.want {
			t.Fatalf("imported at %d: a batch at position 20 added %d events, want %d", tc.at, got, tc.want)
		}
	}
}
