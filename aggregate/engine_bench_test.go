package aggregate

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"edgeflow/internal/cputime"
)

// benchFleet pre-builds one batch per device; each round shifts the
// batches' times forward so event time advances like a live fleet: every
// device sends at 100 Hz, 1000 events (10 s) per batch.
type benchFleet struct {
	batches []*Batch
	step    int64 // event-time advance per round
}

func newBenchFleet(keys int) *benchFleet {
	devices := min(keys, 1000)
	perDev := keys / devices
	f := &benchFleet{step: int64(10 * time.Second)}
	for d := 0; d < devices; d++ {
		b := &Batch{Device: "dev-" + strconv.Itoa(d), Stream: sid(d), ServerTime: at(0)}
		tags := make([][]Tag, perDev)
		for k := range tags {
			tags[k] = []Tag{{Key: "sensor", Value: "s" + strconv.Itoa(k)}}
		}
		for i := 0; i < 1000; i++ {
			b.Events = append(b.Events, Event{
				Seq: uint64(i + 1), Metric: "temp", Tags: tags[i%perDev],
				Value: float64(i%97) + 0.5, Time: at(time.Duration(i) * 10 * time.Millisecond),
			})
		}
		f.batches = append(f.batches, b)
	}
	return f
}

// shift moves one batch a round forward.
func (f *benchFleet) shift(b *Batch) {
	b.ServerTime += f.step
	b.Seq = 0
	for i := range b.Events {
		b.Events[i].Time += f.step
		b.Events[i].Seq += 1000
	}
}

func benchOptions() Options {
	o := testOptions()
	o.WatermarkInterval = 0 // default
	o.MaxSeries = 200_000
	return o
}

// BenchmarkApply measures events/s into the engine with three window kinds
// configured (tumbling, hopping, session), for 1, 1,000 and 100,000 series,
// and the process's CPU time per event (the garbage collector's included).
// Run it with -cpu 1 for the rate on one core.
func BenchmarkApply(b *testing.B) {
	for _, keys := range []int{1, 1000, 100_000} {
		for _, merged := range []bool{false, true} {
			name := fmt.Sprintf("keys=%d/merged_stream=%v", keys, merged)
			b.Run(name, func(b *testing.B) { benchApply(b, keys, merged) })
		}
	}
}

func benchApply(b *testing.B, keys int, merged bool) {
	opt := benchOptions()
	opt.DisableMergedStream = !merged
	e := newEngine(b, opt)
	f := newBenchFleet(keys)
	for _, bt := range f.batches { // warm up: create the series
		mustApply(b, e, bt)
		f.shift(bt)
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cputime.Self()
	events := 0
	for i := 0; events < b.N; i++ {
		bt := f.batches[i%len(f.batches)]
		mustApply(b, e, bt)
		f.shift(bt)
		events += len(bt.Events)
	}
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(events), "ns/event")
	b.ReportMetric(float64(cputime.Self()-cpu0)/float64(events), "cpu-ns/event")
}

// BenchmarkQueryDay measures a query over one day of 10 s windows of one
// series (8,640 windows), with all aggregates and without quantiles, from
// live partials and from the store.
func BenchmarkQueryDay(b *testing.B) {
	for _, c := range []struct {
		name    string
		aggs    Aggs
		evicted bool
	}{
		{"all_aggs/live", AllAggs, false},
		{"no_quantiles/live", AggCount | AggSum | AggMin | AggMax | AggAvg | AggLast, false},
		{"all_aggs/stored", AllAggs, true},
		{"no_quantiles/stored", AggCount | AggSum | AggMin | AggMax | AggAvg | AggLast, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			opt := benchOptions()
			opt.EvictAfter = 48 * time.Hour
			if c.evicted {
				opt.EvictAfter = time.Minute
			}
			e := newEngine(b, opt)
			fillDay(b, e)
			q := Query{Metric: "temp", Window: WindowSpec{Kind: Tumbling, Size: 10 * time.Second},
				From: t0, To: t0.Add(24 * time.Hour), Aggs: c.aggs}
			if n := len(mustQuery(b, e, q)); n != 8640 {
				b.Fatalf("got %d windows, want 8640", n)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				mustQuery(b, e, q)
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/1000, "ms/query")
		})
	}
}

// fillDay feeds one series one event per second for a day (and a bit, so
// the whole day is final).
func fillDay(b testing.TB, e *Engine) {
	for h := 0; h < 25; h++ {
		bt := &Batch{Device: "dev", Stream: sid(0), ServerTime: at(time.Duration(h+1) * time.Hour)}
		for s := 0; s < 3600; s++ {
			d := time.Duration(h)*time.Hour + time.Duration(s)*time.Second
			bt.Events = append(bt.Events, Event{Seq: uint64(h*3600 + s + 1), Metric: "temp", Value: float64(s%100) + 0.25, Time: at(d)})
		}
		mustApply(b, e, bt)
	}
}
