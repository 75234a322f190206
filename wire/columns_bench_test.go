package wire

import (
	"testing"

	"google.golang.org/protobuf/proto"
)

// BenchmarkBatchCodecs measures what each codec costs a batch of 1000
// readings at each end: framing the protobuf body (the agent) and getting
// the events back (the hub: Columns.Decode for the columns, Unframe, the
// decompression, for the others; parsing the protobuf body is extra).
//
//	go test ./wire -run '^$' -bench BatchCodecs -benchmem
func BenchmarkBatchCodecs(b *testing.B) {
	body, _ := proto.Marshal(readings(1000))
	for _, codec := range []Codec{CodecZstd, CodecS2, CodecColumns} {
		frame := FrameWith(MsgBatch, codec, body)
		b.Run("encode/"+codec.String(), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				FrameWith(MsgBatch, codec, body)
			}
			b.ReportMetric(float64(len(frame)), "B/frame")
		})
		b.Run("decode/"+codec.String(), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			var c Columns
			for b.Loop() {
				out, columnar, err := UnframeBatch(frame, Limits{})
				if err == nil && columnar {
					err = c.Decode(out, Limits{})
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
