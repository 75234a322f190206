package hub

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	"edgeflow/hub/hublog"
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
//	go test ./hub -run '^$' -bench BenchmarkEventIndexKeys
func BenchmarkEventIndexKeys(b *testing.B) {
	for _, size := range []int{1000, 1} {
		for _, codec := range []wire.Codec{wire.CodecZstd, wire.CodecColumns} {
			for _, stage := range []string{"worker", "committer"} {
				b.Run(fmt.Sprintf("%v/events=%d/%s", codec, size, stage), func(b *testing.B) {
					batch := makeBatch("bench-0", wire.NewStreamID(), 1, size)
					body, err := proto.Marshal(batch)
					if err != nil {
						b.Fatal(err)
					}
					e := &hublog.Entry{Kind: hublog.KindBatch, Seq: 1, ServerTimeNs: baseTimeNs, Device: "bench-0",
						Payload: wire.FrameWith(wire.MsgBatch, codec, body), Fresh: []ranges.SeqRange{{First: 1, Last: uint64(size)}}}
					v, err := newApplier(nil, nil, nil, limitsWithDefaults(wire.Limits{})).parseStored(e)
					if err != nil {
						b.Fatal(err)
					}
					out := make([]kv, 0, 2+maxIndexKeys)
					b.ReportAllocs()
					b.ResetTimer()
					p := pending{first: 1, last: uint64(size)}
					p.prepareEventIndex(v)
					for range b.N {
						if stage == "worker" {
							p = pending{first: 1, last: uint64(size)}
							p.prepareEventIndex(v)
						} else {
							out = eventIndexKVs(out[:0], e, v, &p.times)
						}
					}
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(size), "ns/event")
				})
			}
		}
	}
}
