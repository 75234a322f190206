package aggregate

import (
	"testing"
	"time"
)

// BenchmarkDownsample measures maintenance passes over ten hours of 1 Hz
// events of one series (values over a factor of about three): downsampled
// partials per second, and the stored bytes per partial of each tier
// (docs/OPERATIONS.md quotes them). Tiers: 5m after 2h, 1h after 4h.
func BenchmarkDownsample(b *testing.B) {
	opt := Options{Resolution: 10 * time.Second, IdleTimeout: time.Minute, EvictAfter: time.Minute, LateHorizon: time.Hour,
		Downsample: []DownsampleTier{{After: 2 * time.Hour, Resolution: 5 * time.Minute}, {After: 4 * time.Hour, Resolution: time.Hour}}}
	var batches []*Batch
	for h := 0; h < 10; h++ {
		bt := &Batch{Device: "d", Stream: sid(1), ServerTime: at(time.Duration(h+1) * time.Hour)}
		for s := 0; s < 3600; s++ {
			bt.Events = append(bt.Events, Event{Seq: uint64(h*3600 + s + 1), Metric: "m", Value: 20 + float64(s%100)*0.37,
				Time: at(time.Duration(h)*time.Hour + time.Duration(s)*time.Second)})
		}
		batches = append(batches, bt)
	}
	var downsampled uint64
	var ms *MemStore
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		clk := &fakeClock{now: t0}
		opt.Clock = clk.Now
		ms = NewMemStore()
		opt.Store = ms
		e := newEngine(b, opt)
		for _, bt := range batches {
			mustApply(b, e, bt)
		}
		clk.now = t0.Add(10 * time.Hour)
		b.StartTimer()
		settle(e)
		downsampled += e.Stats().Downsampled
	}
	b.ReportMetric(float64(downsampled)/b.Elapsed().Seconds(), "partials/s")
	var n, size [3]int
	ms.SnapshotTo(func(tier uint8, _ uint32, _ int64, d []byte) { n[tier]++; size[tier] += len(d) })
	for t, unit := range []string{"B/partial(10s)", "B/partial(5m)", "B/partial(1h)"} {
		if n[t] > 0 {
			b.ReportMetric(float64(size[t])/float64(n[t]), unit)
		}
	}
}
