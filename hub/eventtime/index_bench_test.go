package eventtime

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	"edgeflow/hub/batchview"
	"edgeflow/hub/hublog"
	"edgeflow/hub/internal/hubtest"
	"edgeflow/hub/ranges"
	"edgeflow/wire"
)

// BenchmarkEventIndexKeys measures what the event-time index adds per
// batch: the corrected time and buckets of each event (worker: in a
// decode worker, one per core) and the keys (committer: on the one
// goroutine every batch goes through), for batches of 1000 events 1 ms
// apart (the ingest benchmark's) and of one event (the fleet's), in both
// codecs.
//
//	go test ./hub/eventtime -run '^$' -bench BenchmarkEventIndexKeys
func BenchmarkEventIndexKeys(b *testing.B) {
	for _, size := range []int{1000, 1} {
		for _, codec := range []wire.Codec{wire.CodecZstd, wire.CodecColumns} {
			for _, stage := range []string{"worker", "committer"} {
				b.Run(fmt.Sprintf("%v/events=%d/%s", codec, size, stage), func(b *testing.B) {
					batch := hubtest.MakeBatch("bench-0", wire.NewStreamID(), 1, size)
					body, err := proto.Marshal(batch)
					if err != nil {
						b.Fatal(err)
					}
					e := &hublog.Entry{Kind: hublog.KindBatch, Seq: 1, ServerTimeNs: hubtest.BaseTimeNs, Device: "bench-0",
						Payload: wire.FrameWith(wire.MsgBatch, codec, body), Fresh: []ranges.SeqRange{{First: 1, Last: uint64(size)}}}
					v := new(batchview.View)
					if err := batchview.ParseBatchFrame(v, e.Payload, wire.DefaultLimits); err != nil {
						b.Fatal(err)
					}
					out := make([]KV, 0, MaxKeys)
					b.ReportAllocs()
					b.ResetTimer()
					var p Buckets
					p.Prepare(v, 1, uint64(size))
					for range b.N {
						if stage == "worker" {
							p = Buckets{}
							p.Prepare(v, 1, uint64(size))
						} else {
							out = AppendKVs(out[:0], e, v, &p)
						}
					}
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(size), "ns/event")
				})
			}
		}
	}
}
