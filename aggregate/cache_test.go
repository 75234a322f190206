package aggregate

import (
	"testing"
	"time"
)

// TestQueryCacheSeesLateData: a query caches the decoded stored partials;
// a late event that reloads, changes and re-evicts one of them shows in the
// next answer, and the cache counts hits and misses.
func TestQueryCacheSeesLateData(t *testing.T) {
	opt := testOptions()
	opt.EvictAfter = time.Minute
	e := newEngine(t, opt)
	var seq uint64
	mustApply(t, e, series10s("a", 1, &seq, 0, time.Hour, at(time.Hour)))
	mustApply(t, e, series10s("a", 1, &seq, time.Hour, 3*time.Hour, at(3*time.Hour)))
	if e.Stats().Evicted == 0 {
		t.Fatal("nothing evicted")
	}
	q := Query{Metric: "m", Window: WindowSpec{Kind: Tumbling, Size: time.Minute}, From: t0, To: t0.Add(time.Hour)}
	first := mustQuery(t, e, q)
	again := mustQuery(t, e, q)
	if diffResults(first, again) != "" {
		t.Fatal("a cached answer differs")
	}
	if s := e.Stats(); s.QueryCacheHits == 0 || s.QueryCacheMisses == 0 || s.QueryCachePartials == 0 {
		t.Fatalf("cache stats %+v", s)
	}
	// A late event for [10m, 11m), then time moves on so it is evicted again.
	mustApply(t, e, batchOf("a", 1, at(3*time.Hour), ev{seq: seq + 1, metric: "m", v: 100, t: at(10*time.Minute + 5*time.Second)}))
	seq++
	mustApply(t, e, series10s("a", 1, &seq, 3*time.Hour, 4*time.Hour, at(4*time.Hour)))
	for _, got := range [][]WindowResult{mustQuery(t, e, q), mustQuery(t, e, q)} {
		w := find(got, 10*time.Minute)
		if w == nil || w.Count != 7 || w.Max != 100 || w.Late != 1 {
			t.Fatalf("after the late event: %+v", w)
		}
	}
}

// TestQueryCacheMixedBlocks: a query over blocks some of which are cached
// (by an earlier, shorter query) and some not answers as an engine that
// never evicted, the first time and again from the cache.
func TestQueryCacheMixedBlocks(t *testing.T) {
	live, evicted := liveAndEvicted(t, 6, nil)
	w := WindowSpec{Kind: Hopping, Size: 5 * time.Minute, Slide: time.Minute}
	short := Query{Metric: "m", Window: w, From: t0.Add(2 * time.Hour), To: t0.Add(3 * time.Hour)}
	long := Query{Metric: "m", Window: w, From: t0.Add(-time.Hour), To: t0.Add(5 * time.Hour)}
	mustQuery(t, evicted, short)
	for round := 0; round < 2; round++ {
		if d := diffResults(mustQuery(t, live, long), mustQuery(t, evicted, long)); d != "" {
			t.Fatalf("round %d: %s", round, d)
		}
	}
	if s := evicted.Stats(); s.QueryCacheHits < 7 || s.QueryCachePartials > 5000 {
		t.Fatalf("cache stats %+v", s)
	}
}

// TestStoredQuantiles: a query whose windows are single stored partials
// answers quantiles from the values stored with them, exactly as from the
// sketches; partials stored without them (by older versions) still answer
// from their sketches; and a block cached without quantiles is read again
// when a query asks for them.
func TestStoredQuantiles(t *testing.T) {
	live, evicted := liveAndEvicted(t, 3, func(j int) float64 { return float64(j%17) * 1.5 })
	ms := evicted.opt.Store.(*MemStore)
	// Rewrite the first hour's partials as an older version stored them.
	for bk := at(0) / int64(10*time.Second); bk < at(time.Hour)/int64(10*time.Second); bk++ {
		data, ok, err := ms.Get(0, 0, bk)
		if err != nil || !ok {
			t.Fatalf("partial %d: %v %v", bk, ok, err)
		}
		var p partial
		d := decoder{b: data}
		decodePartial(&d, evicted.sks, &p, true)
		var enc encoder
		encodePartial(&enc, &p)
		if len(enc.b) != len(data)-24 {
			t.Fatalf("stored partial is %d bytes, %d without quantiles", len(data), len(enc.b))
		}
		if err := ms.Put(0, 0, bk, enc.b); err != nil {
			t.Fatal(err)
		}
	}
	evicted.cache.reset()
	w := WindowSpec{Kind: Tumbling, Size: 10 * time.Second}
	q := Query{Metric: "m", Window: w, From: t0, To: t0.Add(3 * time.Hour)}
	noQ := q
	noQ.Aggs = AggCount | AggSum
	mustQuery(t, evicted, noQ) // caches blocks without quantiles
	want := mustQuery(t, live, q)
	for round := 0; round < 2; round++ {
		got := mustQuery(t, evicted, q)
		if d := diffResults(want, got); d != "" {
			t.Fatalf("round %d: %s", round, d)
		}
		if got[5].P99 == 0 || got[400].P99 == 0 {
			t.Fatalf("round %d: no quantiles: %+v %+v", round, got[5], got[400])
		}
	}
}

// liveAndEvicted feeds two engines (query cache 5,000 partials, MemStore)
// the same hours of one series, one event per 10 s (value(j) for the j-th
// event of an hour, 1 when nil), one batch per hour: live keeps every
// partial in memory, evicted moves each to the store a minute after it is
// final.
func liveAndEvicted(t *testing.T, hours int, value func(j int) float64) (live, evicted *Engine) {
	t.Helper()
	for i, after := range []time.Duration{1000 * time.Hour, time.Minute} {
		opt := testOptions()
		opt.EvictAfter = after
		opt.QueryCachePartials = 5000
		opt.Store = NewMemStore()
		e := newEngine(t, opt)
		var seq uint64
		for h := 0; h < hours; h++ {
			b := series10s("a", 1, &seq, time.Duration(h)*time.Hour, time.Duration(h+1)*time.Hour, at(time.Duration(h+1)*time.Hour))
			for j := range b.Events {
				if value != nil {
					b.Events[j].Value = value(j)
				}
			}
			mustApply(t, e, b)
		}
		if i == 0 {
			live = e
		} else {
			evicted = e
		}
	}
	return live, evicted
}
