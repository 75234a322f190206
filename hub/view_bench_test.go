package hub

import (
	"testing"

	"google.golang.org/protobuf/proto"

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

// BenchmarkValidateColumns measures validateBatch on a columnar batch of
// 1000 events, the checks the hub runs on every batch before it logs it.
// One op is one batch.
//
//	go test ./hub/ -run '^$' -bench BenchmarkValidateColumns
func BenchmarkValidateColumns(b *testing.B) {
	lim := limitsWithDefaults(wire.Limits{})
	body, err := proto.Marshal(makeBatch("dev-p", wire.NewStreamID(), 1, 1000))
	if err != nil {
		b.Fatal(err)
	}
	frame := wire.FrameWith(wire.MsgBatch, wire.CodecColumns, body)
	var v batchView
	if err := parseBatchFrame(&v, frame, lim); err != nil || !v.columnar {
		b.Fatal(v.columnar, err)
	}
	for b.Loop() {
		if err := validateBatch(&v, "dev-p"); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)*1000/b.Elapsed().Seconds(), "events/s")
}
