package hub

import (
	"testing"

	"edgeflow/wire"
)

// BenchmarkParseBatchView measures the zero-copy parse of a decompressed
// batch of 1000 events (one tag each) on the hub's decode path. One op is
// one batch.
//
//	go test ./hub/ -run '^$' -bench BenchmarkParseBatchView
func BenchmarkParseBatchView(b *testing.B) {
	lim := limitsWithDefaults(wire.Limits{})
	body, err := wire.Unframe(wire.MsgBatch, encodeBatch(b, makeBatch("dev-p", wire.NewStreamID(), 1, 1000)), lim)
	if err != nil {
		b.Fatal(err)
	}
	var v batchView
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if err := parseBatchView(&v, body, lim); err != nil || len(v.events) != 1000 {
			b.Fatal(len(v.events), err)
		}
	}
	b.ReportMetric(float64(b.N)*1000/b.Elapsed().Seconds(), "events/s")
}
