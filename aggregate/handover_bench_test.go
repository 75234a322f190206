package aggregate

import (
	"fmt"
	"testing"
	"time"
)

// handoverFleet builds an engine holding 1,000 devices, one stream each,
// two series each (tag room), an event every 10 s over two hours of event
// time, sent a batch a minute: with the default evict_after (1 h) about
// half of each series' partials are live and half in the MemStore.
func handoverFleet(b *testing.B) (*Engine, Options) {
	b.Helper()
	opt := benchOptions()
	opt.Windows = nil
	clk := &fakeClock{now: t0}
	opt.Clock = clk.Now
	e := newEngine(b, opt)
	rooms := []string{"kitchen", "hall"}
	var seq uint64
	for minute := range 120 {
		for d := range 1000 {
			seq++
			bt := &Batch{Seq: seq, Device: fmt.Sprintf("dev-%04d", d), Stream: sid(d), ServerTime: at(time.Duration(minute+1) * time.Minute)}
			for i := range 6 {
				bt.Events = append(bt.Events, Event{Seq: uint64(minute*6 + i + 1), Metric: "m", Tags: []Tag{{Key: "room", Value: rooms[i%2]}},
					Value: float64((d+i)%97) + 0.5, Time: at(time.Duration(minute)*time.Minute + time.Duration(i)*10*time.Second)})
			}
			if err := e.Apply(bt); err != nil {
				b.Fatal(err)
			}
		}
	}
	return e, opt
}

// BenchmarkHandover compares handing 1/64 of 1,000 devices to another
// engine (ExportDevices on the giver, ImportDevices on the taker, and the
// giver's DropDevices) with moving the whole engine by Snapshot and
// Restore.
func BenchmarkHandover(b *testing.B) {
	src, opt := handoverFleet(b)
	sel := func(dev string) bool { return partitionOf(dev, 64) == 0 }
	moved := 0
	for d := range 1000 {
		if sel(fmt.Sprintf("dev-%04d", d)) {
			moved++
		}
	}
	st := src.Stats()
	b.Logf("fleet: %d series, %d live partials, %d stored; %d devices move", st.Series, st.LivePartials, st.Evicted, moved)
	b.Run("export+import-1of64", func(b *testing.B) {
		var size int
		for b.Loop() {
			b.StopTimer()
			dst := newEngine(b, opt)
			b.StartTimer()
			data, err := src.ExportDevices(sel)
			if err != nil {
				b.Fatal(err)
			}
			if err := dst.ImportDevices(data); err != nil {
				b.Fatal(err)
			}
			size = len(data)
		}
		b.ReportMetric(float64(size), "bytes")
	})
	b.Run("drop-1of64", func(b *testing.B) {
		snap, err := src.Snapshot()
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			b.StopTimer()
			e := newEngine(b, opt)
			if err := e.Restore(snap); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			if _, err := e.DropDevices(sel); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("snapshot+restore-all", func(b *testing.B) {
		var size int
		for b.Loop() {
			b.StopTimer()
			dst := newEngine(b, opt)
			b.StartTimer()
			snap, err := src.Snapshot()
			if err != nil {
				b.Fatal(err)
			}
			if err := dst.Restore(snap); err != nil {
				b.Fatal(err)
			}
			size = len(snap)
		}
		b.ReportMetric(float64(size), "bytes")
	})
}
