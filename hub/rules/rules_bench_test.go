package rules

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"edgeflow/aggregate"
)

// benchRules are 100 threshold rules (10 per metric, over 10 metrics,
// grouped by device) and 10 sequence rules.
func benchRules(b *testing.B) []Rule {
	var y strings.Builder
	y.WriteString("rules:\n")
	// Values are uniform in [0, 128): the avg rules fire for a few
	// windows, the others rarely, as rules watching a healthy fleet do.
	aggs := []string{"avg", "max", "min", "count", "sum", "last", "avg", "max", "p95", "avg"}
	vals := []int{75, 200, 60, 100, 10000, 127, 80, 300, 200, 85}
	for m := range 10 {
		for k := range 10 {
			fmt.Fprintf(&y, "  - {name: t%d-%d, metric: m%d, window: \"tumbling:10s\", agg: %s, op: \">\", value: %d, group_by: [device]}\n", m, k, m, aggs[k], vals[k])
		}
	}
	for k := range 10 {
		fmt.Fprintf(&y, "  - {name: s%d, kind: sequence, first: {metric: m%d, op: \">\", value: 125}, then: {metric: m%d, op: \">\", value: 126}, within: 5s}\n", k, k, (k+1)%10)
	}
	return mustRules(b, y.String())
}

// BenchmarkRules measures events/s through the aggregate engine at 1,000
// devices with no rules and with 100 threshold and 10 sequence rules fed
// from the engine's updates, as the hub feeds them.
func BenchmarkRules(b *testing.B) {
	for _, withRules := range []bool{false, true} {
		name := "none"
		if withRules {
			name = "100threshold+10sequence"
		}
		b.Run(name, func(b *testing.B) { benchRulesRun(b, withRules) })
	}
}

func benchRulesRun(b *testing.B, withRules bool) {
	const devices, perBatch = 1000, 50
	clk := &fakeClock{now: t0}
	eng, err := aggregate.New(aggregate.Options{Resolution: time.Second, WatermarkInterval: time.Nanosecond,
		Clock: clk.Now, LateHorizon: time.Hour, IdleTimeout: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	sub := eng.Subscribe(1 << 16)
	var ev *Evaluator
	if withRules {
		ev = newEval(b, benchRules(b), Options{})
	}
	names := make([]string, devices)
	metrics := make([]string, 10)
	for i := range names {
		names[i] = fmt.Sprintf("d%04d", i)
	}
	for i := range metrics {
		metrics[i] = fmt.Sprintf("m%d", i)
	}
	seqs := make([]uint64, devices)
	batch := &aggregate.Batch{Events: make([]aggregate.Event, perBatch)}
	var ups []aggregate.Update
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		d := i % devices
		round := int64(i / devices) // each round is one second of event time
		batch.Device = names[d]
		copy(batch.Stream[:], names[d])
		clk.now = t0.Add(time.Duration(round+1) * time.Second)
		batch.ServerTime = clk.now.UnixNano()
		for k := range batch.Events {
			seqs[d]++
			x := uint64(i*perBatch+k) * 0x9E3779B97F4A7C15
			batch.Events[k] = aggregate.Event{Seq: seqs[d], Metric: metrics[k%10], Value: float64(x >> 57),
				Time: t0.UnixNano() + round*int64(time.Second) + int64(k)*int64(time.Second)/perBatch}
		}
		if ev != nil {
			ev.ObserveBatch(batch)
		}
		if err := eng.Apply(batch); err != nil {
			b.Fatal(err)
		}
		ups = ups[:0]
		for len(sub.Updates()) > 0 {
			ups = append(ups, <-sub.Updates())
		}
		if ev != nil {
			if err := ev.Feed(eng, ups); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.N*perBatch)/time.Since(start).Seconds(), "events/s")
	if ev != nil {
		b.ReportMetric(float64(ev.Stats().Alerts), "alerts")
	}
}
