package hub

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"edgeflow/aggregate"
	"edgeflow/hub/hublog"
)

// BenchmarkQueryDayHTTP measures GET /v1/aggregates over real HTTP for one
// day of 10 s tumbling windows of one series (8,640 windows, every
// aggregate), with the day's partials in memory.
func BenchmarkQueryDayHTTP(b *testing.B) {
	o := aggTestOptions(b, b.TempDir())
	o.TickInterval = time.Hour
	s := startHub(b, o)
	day := time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)
	eng := s.Engine()
	var id aggregate.StreamID
	for i := 0; i < 8640; i += 100 {
		batch := aggregate.Batch{Device: "d1", Stream: id, ServerTime: day.Add(24 * time.Hour).UnixNano()}
		for j := i; j < i+100 && j < 8640; j++ {
			batch.Events = append(batch.Events, aggregate.Event{Seq: uint64(j + 1), Metric: "temp", Value: float64(j % 50),
				Time: day.Add(time.Duration(j) * 10 * time.Second).UnixNano()})
		}
		if err := eng.Apply(&batch); err != nil {
			b.Fatal(err)
		}
	}
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	url := fmt.Sprintf("%s/v1/aggregates?metric=temp&window=tumbling:10s&from=%d&to=%d", srv.URL, day.UnixMilli(), day.Add(24*time.Hour).UnixMilli())
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		resp, err := http.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || n < 8640*100 {
			b.Fatalf("status %d, %d bytes", resp.StatusCode, n)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/1000, "ms/query")
}

// BenchmarkQueryDayEngine measures the engine's query over one day of 10 s
// tumbling windows of one series (8,640 windows), as the hub runs it:
// "live" with the day's partials in memory; "evicted" with every partial
// evicted to the hub's Badger store (evict_after 1m), either "cold" (query
// cache off: every query reads and decodes the day from Badger) or "warm"
// (the default query cache holds the decoded day after the first query).
// all_aggs includes the quantiles (sketches decoded); no_quantiles reads
// count, sum, min, max, avg and last only.
func BenchmarkQueryDayEngine(b *testing.B) {
	for _, c := range []struct {
		name    string
		aggs    aggregate.Aggs
		evicted bool
		cache   int
	}{
		{"live/all_aggs", aggregate.AllAggs, false, 0},
		{"live/no_quantiles", noQuantiles, false, 0},
		{"evicted/cold/all_aggs", aggregate.AllAggs, true, 1},
		{"evicted/cold/no_quantiles", noQuantiles, true, 1},
		{"evicted/warm/all_aggs", aggregate.AllAggs, true, 0},
		{"evicted/warm/no_quantiles", noQuantiles, true, 0},
	} {
		b.Run(c.name, func(b *testing.B) {
			a := dayOfPartials(b, c.evicted, c.cache)
			q := aggregate.Query{Metric: "temp", Window: aggregate.WindowSpec{Kind: aggregate.Tumbling, Size: 10 * time.Second},
				From: benchDay, To: benchDay.Add(24 * time.Hour), Aggs: c.aggs}
			if res, err := a.eng.Query(q); err != nil || len(res) != 8640 {
				b.Fatalf("got %d windows, %v; want 8640", len(res), err)
			}
			if st := a.eng.Stats(); c.evicted != (st.Evicted >= 8640) {
				b.Fatalf("evicted %d partials", st.Evicted)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := a.eng.Query(q); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/1000, "ms/query")
		})
	}
}

const noQuantiles = aggregate.AggCount | aggregate.AggSum | aggregate.AggMin | aggregate.AggMax | aggregate.AggAvg | aggregate.AggLast

var benchDay = time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)

// dayOfPartials feeds the hub's engine (with its Badger partial store in a
// temporary directory) one event per second of one series for a day and
// an hour, so the whole day is final; evicted selects evict_after 1m
// (everything in Badger) or 48h; cache is query_cache_partials (0: default).
func dayOfPartials(b *testing.B, evicted bool, cache int) *aggregates {
	st, err := hublog.OpenStore(b.TempDir(), false, quietLogger(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	opt := aggregate.Options{IdleTimeout: time.Minute, EvictAfter: 48 * time.Hour, MaxSeries: 10, QueryCachePartials: cache}
	if evicted {
		opt.EvictAfter = time.Minute
	}
	a, err := newAggregates(opt, quietLogger(b), time.Now)
	if err != nil {
		b.Fatal(err)
	}
	a.store.Bind(st.DB)
	var id aggregate.StreamID
	for h := 0; h < 25; h++ {
		bt := aggregate.Batch{Seq: uint64(h + 1), Device: "d1", Stream: id, ServerTime: benchDay.Add(time.Duration(h+1) * time.Hour).UnixNano()}
		for s := 0; s < 3600; s++ {
			bt.Events = append(bt.Events, aggregate.Event{Seq: uint64(h*3600 + s + 1), Metric: "temp", Value: float64(s%100) + 0.25,
				Time: benchDay.Add(time.Duration(h)*time.Hour + time.Duration(s)*time.Second).UnixNano()})
		}
		if err := a.eng.Apply(&bt); err != nil {
			b.Fatal(err)
		}
		a.flush()
	}
	return a
}
