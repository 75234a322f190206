package batchview

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"edgeflow/hub/internal/hubtest"
	"edgeflow/wire"
)

// BenchmarkParseBatchView measures the zero-copy parse of a decompressed
// batch of 1000 events (one tag each) on the hub's decode path. One op is
// one batch.
//
//	go test ./hub/batchview -run '^$' -bench BenchmarkParseBatchView
func BenchmarkParseBatchView(b *testing.B) {
	lim := wire.DefaultLimits
	body, err := wire.Unframe(wire.MsgBatch, hubtest.EncodeBatch(b, hubtest.MakeBatch("dev-p", wire.NewStreamID(), 1, 1000)), lim)
	if err != nil {
		b.Fatal(err)
	}
	var v View
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if err := ParseBatchView(&v, body, lim); err != nil || len(v.Events) != 1000 {
			b.Fatal(len(v.Events), err)
		}
	}
	b.ReportMetric(float64(b.N)*1000/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkValidateColumns measures ValidateBatch on a columnar batch of
// 1000 events, the checks the hub runs on every batch before it logs it.
// One op is one batch.
//
//	go test ./hub/batchview -run '^$' -bench BenchmarkValidateColumns
func BenchmarkValidateColumns(b *testing.B) {
	lim := wire.DefaultLimits
	body, err := proto.Marshal(hubtest.MakeBatch("dev-p", wire.NewStreamID(), 1, 1000))
	if err != nil {
		b.Fatal(err)
	}
	frame := wire.FrameWith(wire.MsgBatch, wire.CodecColumns, body)
	var v View
	if err := ParseBatchFrame(&v, frame, lim); err != nil || !v.Columnar {
		b.Fatal(v.Columnar, err)
	}
	for b.Loop() {
		if err := ValidateBatch(&v, "dev-p"); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)*1000/b.Elapsed().Seconds(), "events/s")
}
