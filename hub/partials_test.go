package hub

import (
	"fmt"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"edgeflow/aggregate"
	"edgeflow/hub/hublog"
)

// TestBadgerPartials checks Put (buffered), flush, Get and Scan order,
// negative buckets, generations and that buffered data wins.
func TestBadgerPartials(t *testing.T) {
	st, err := hublog.OpenStore(t.TempDir(), false, quietLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	p := hublog.NewBadgerPartials()
	p.Bind(st.DB)
	for _, bk := range []int64{-5, 3, 1, 7} {
		if err := p.Put(0, 2, bk, []byte(fmt.Sprint("v", bk))); err != nil {
			t.Fatal(err)
		}
	}
	_ = p.Put(0, 1, 3, []byte("other series"))
	scan := func(from, to int64) string {
		out := ""
		if err := p.Scan(0, 2, from, to, func(bk int64, d []byte) bool { out += fmt.Sprintf("%d=%s ", bk, d); return true }); err != nil {
			t.Fatal(err)
		}
		return out
	}
	if got := scan(-10, 7); got != "-5=v-5 1=v1 3=v3 " {
		t.Fatalf("buffered scan: %q", got)
	}
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	_ = p.Put(0, 2, 3, []byte("new3"))
	_ = p.Put(0, 2, 2, []byte("v2"))
	if got := scan(-10, 100); got != "-5=v-5 1=v1 2=v2 3=new3 7=v7 " {
		t.Fatalf("mixed scan: %q", got)
	}
	if d, ok, err := p.Get(0, 2, 7); err != nil || !ok || string(d) != "v7" {
		t.Fatalf("get: %q %v %v", d, ok, err)
	}
	if _, ok, _ := p.Get(0, 2, 8); ok {
		t.Fatal("get of a missing partial")
	}
	p.SetGeneration(1)
	if _, ok, _ := p.Get(0, 2, 7); ok {
		t.Fatal("generation 1 sees generation 0")
	}
	n, err := hublog.DropGenerations(st.DB, func(g uint64) bool { return g == 0 })
	if err != nil || n != 5 {
		t.Fatalf("dropped %d, %v", n, err)
	}
}

// TestBadgerPartialsTiers checks the tiered keys: keys written before
// downsampling existed read as tier 0, tiers do not see each other,
// Replace swaps fine for coarse partials in one transaction (buffered
// ones included), DeleteRange counts, and generations drop every tier.
func TestBadgerPartialsTiers(t *testing.T) {
	st, err := hublog.OpenStore(t.TempDir(), false, quietLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// A key as hubs wrote it before tiers: a<gen:8><series:4><bucket^sign:8>.
	old := []byte{hublog.PrefixPartials, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0x80, 0, 0, 0, 0, 0, 0, 5}
	if err := st.DB.Update(func(txn *badger.Txn) error { return txn.Set(old, []byte("old5")) }); err != nil {
		t.Fatal(err)
	}
	p := hublog.NewBadgerPartials()
	p.Bind(st.DB)
	if d, ok, err := p.Get(0, 2, 5); err != nil || !ok || string(d) != "old5" {
		t.Fatalf("old-format key as tier 0: %q %v %v", d, ok, err)
	}
	for bk := int64(0); bk < 12; bk++ {
		if bk != 5 {
			_ = p.Put(0, 2, bk, []byte(fmt.Sprint("f", bk)))
		}
	}
	_ = p.Put(0, 3, 1, []byte("other series"))
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	_ = p.Put(0, 2, 7, []byte("buffered7"))
	scan := func(tier uint8, series uint32) string {
		out := ""
		if err := p.Scan(tier, series, -100, 100, func(bk int64, d []byte) bool { out += fmt.Sprintf("%d=%s ", bk, d); return true }); err != nil {
			t.Fatal(err)
		}
		return out
	}
	if got := scan(1, 2); got != "" {
		t.Fatalf("tier 1 before Replace: %q", got)
	}
	if err := p.Replace(2, 0, 0, 8, 1, []aggregate.StoredPartial{{Bucket: 0, Data: []byte("c0")}, {Bucket: 4, Data: []byte("c4")}}); err != nil {
		t.Fatal(err)
	}
	if got := scan(0, 2); got != "8=f8 9=f9 10=f10 11=f11 " {
		t.Fatalf("tier 0 after Replace: %q", got)
	}
	if got := scan(1, 2); got != "0=c0 4=c4 " {
		t.Fatalf("tier 1 after Replace: %q", got)
	}
	if p.Flush() != nil || scan(0, 2) != "8=f8 9=f9 10=f10 11=f11 " {
		t.Fatal("a replaced buffered partial came back with flush")
	}
	if d, ok, _ := p.Get(1, 2, 4); !ok || string(d) != "c4" {
		t.Fatalf("get tier 1: %q %v", d, ok)
	}
	if n, err := p.DeleteRange(1, 2, -100, 4); err != nil || n != 1 {
		t.Fatalf("delete tier 1: %d %v", n, err)
	}
	if got := scan(1, 2) + "|" + scan(0, 3); got != "4=c4 |1=other series " {
		t.Fatalf("after delete: %q", got)
	}
	n, err := hublog.DropGenerations(st.DB, func(g uint64) bool { return g == 0 })
	if err != nil || n != 6 {
		t.Fatalf("dropped %d, %v (want 4 + 1 tier 0 partials of two series, 1 tier 1)", n, err)
	}
}

// TestDownsampleBadgerRestart runs the engine with downsampling on the
// hub's Badger store, checkpoints, reopens the data directory into a new
// engine and checks both answer exactly as an engine that never
// downsampled, with fewer keys in Badger.
func TestDownsampleBadgerRestart(t *testing.T) {
	dir := t.TempDir()
	base := time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)
	opt := aggregate.Options{IdleTimeout: time.Minute, EvictAfter: time.Minute, LateHorizon: 30 * time.Minute, MaxSeries: 10,
		Downsample:        []aggregate.DownsampleTier{{After: 2 * time.Hour, Resolution: time.Minute}, {After: 4 * time.Hour, Resolution: 5 * time.Minute}},
		PartialsRetention: 5 * time.Hour}
	var batches []aggregate.Batch
	for m := 0; m < 6*60; m++ { // one batch a minute, two devices, an event every 7 s
		for d, dev := range []string{"d1", "d2"} {
			bt := aggregate.Batch{Seq: uint64(len(batches) + 1), Device: dev, Stream: aggregate.StreamID{byte(d)}, ServerTime: base.Add(time.Duration(m+1) * time.Minute).UnixNano()}
			for s := d; s < 60; s += 7 {
				bt.Events = append(bt.Events, aggregate.Event{Seq: uint64(m*60 + s + 1), Metric: "temp", Value: float64((m*60+s)%97) / 4,
					Time: base.Add(time.Duration(m)*time.Minute + time.Duration(s)*time.Second).UnixNano()})
			}
			batches = append(batches, bt)
		}
	}
	end := base.Add(7 * time.Hour)
	run := func(opt aggregate.Options, st *hublog.Store) *aggregates {
		a, err := newAggregates(opt, quietLogger(t), time.Now)
		if err != nil {
			t.Fatal(err)
		}
		a.store.Bind(st.DB)
		for i := range batches {
			if err := a.eng.Apply(&batches[i]); err != nil {
				t.Fatal(err)
			}
			a.flush()
		}
		for i := 1; i <= 30; i++ { // one tick a minute of processing time
			a.Tick(base.Add(6*time.Hour + time.Duration(i)*time.Minute))
		}
		return a
	}
	ref := opt
	ref.Downsample, ref.PartialsRetention = nil, 0
	refStore, err := hublog.OpenStore(t.TempDir(), false, quietLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer refStore.Close()
	want := run(ref, refStore)

	st, err := hublog.OpenStore(dir, false, quietLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	got := run(opt, st)
	s := got.eng.Stats()
	if s.Downsampled == 0 || s.RetentionDeleted == 0 || s.StoreErrors != 0 {
		t.Fatalf("stats: %+v", s)
	}
	keys := 0
	if _, err := hublog.DropGenerations(st.DB, func(uint64) bool { keys++; return false }); err != nil {
		t.Fatal(err)
	}
	if keys >= int(s.Evicted)/2 {
		t.Fatalf("%d partial keys in Badger for %d evicted partials", keys, s.Evicted)
	}
	snap, err := got.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	from := base.Add(-time.Hour)
	if c := got.eng.Stats().Watermark; c.IsZero() {
		t.Fatal("no watermark")
	}
	queries := []aggregate.Query{
		{Metric: "temp", Window: aggregate.WindowSpec{Kind: aggregate.Tumbling, Size: 5 * time.Minute}, From: from, To: end},
		{Metric: "temp", Window: aggregate.WindowSpec{Kind: aggregate.Hopping, Size: time.Hour, Slide: 5 * time.Minute}, From: from, To: end, GroupBy: []string{"device"}},
		{Metric: "temp", Window: aggregate.WindowSpec{Kind: aggregate.Session, Gap: 10 * time.Minute}, From: from, To: end},
	}
	answers := func(a *aggregates) string {
		out := ""
		for _, q := range queries {
			res, err := a.eng.Query(q)
			if err != nil {
				t.Fatal(err)
			}
			out += fmt.Sprintln(res)
		}
		return out
	}
	// Retention removed what is older than 5h before the watermark: the
	// reference keeps it, so compare from the retention cut on.
	cut := got.eng.Stats().Watermark.Add(-5 * time.Hour).Truncate(5 * time.Minute).Add(5 * time.Minute)
	for i := range queries {
		queries[i].From = cut
	}
	wantAns, gotAns := answers(want), answers(got)
	t.Logf("downsampled %d, retention deleted %d of %d evicted; %d keys left; compared from %v, %d bytes of answers",
		s.Downsampled, s.RetentionDeleted, s.Evicted, keys, cut, len(gotAns))
	if wantAns != gotAns {
		t.Fatalf("downsampled answers differ:\n%s\n%s", wantAns, gotAns)
	}
	st.Close()

	st2, err := hublog.OpenStore(dir, false, quietLogger(t)) // restart on the same directory
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	again, err := newAggregates(opt, quietLogger(t), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	again.store.Bind(st2.DB)
	if err := again.Restore(snap); err != nil {
		t.Fatal(err)
	}
	if a := answers(again); a != gotAns {
		t.Fatalf("answers after the restart differ:\n%s\n%s", gotAns, a)
	}
}
