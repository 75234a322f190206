package aggregate_test

import (
	"fmt"
	"time"

	"edgeflow/aggregate"
)

// Example shows a hub feeding batches and asking for 1-minute windows.
func Example() {
	e, err := aggregate.New(aggregate.Options{
		Windows: []aggregate.WindowConfig{{Name: "1m", Kind: "tumbling", Size: time.Minute}},
	})
	if err != nil {
		panic(err)
	}
	start := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	b := &aggregate.Batch{Device: "pump-7", ServerTime: start.Add(3 * time.Minute).UnixNano()}
	for i := 0; i < 120; i++ {
		b.Events = append(b.Events, aggregate.Event{
			Seq: uint64(i + 1), Metric: "temp", Value: float64(20 + i%3),
			Time: start.Add(time.Duration(i) * time.Second).UnixNano(),
		})
	}
	if err := e.Apply(b); err != nil {
		panic(err)
	}
	ws, err := e.Query(aggregate.Query{
		Metric: "temp", WindowName: "1m", From: start, To: start.Add(time.Hour),
		Aggs: aggregate.AggCount | aggregate.AggAvg | aggregate.AggMax,
	})
	if err != nil {
		panic(err)
	}
	for _, w := range ws {
		fmt.Printf("%s count=%d avg=%.1f max=%v final=%v\n", w.Start.Format("15:04"), w.Count, w.Avg, w.Max, w.Final)
	}
	// Output:
	// 12:00 count=60 avg=21.0 max=22 final=true
	// 12:01 count=60 avg=21.0 max=22 final=false
}
