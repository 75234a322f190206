package wire

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"edgeflow/wire/wirepb"
)

func seedFrames(f *testing.F, frames ...[]byte) {
	for _, b := range frames {
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{frameMagic, SchemaVersion, byte(CodecZstd), byte(MsgBatch), 0x80})
}

func FuzzDecodeBatch(f *testing.F) {
	small, _ := EncodeBatch(sampleBatch(2))
	big, _ := EncodeBatch(sampleBatch(300))
	body, _ := proto.Marshal(sampleBatch(300))
	seedFrames(f, small, big, FrameWith(MsgBatch, CodecS2, body), FrameWith(MsgBatch, CodecColumns, body))
	f.Fuzz(func(t *testing.T, b []byte) {
		lim := Limits{MaxEvents: 1000, MaxBodyBytes: 1 << 20}
		batch, err := DecodeBatch(b, lim)
		if err != nil {
			return
		}
		if len(batch.Events) > lim.MaxEvents {
			t.Fatalf("decoded %d events over the limit", len(batch.Events))
		}
		for _, e := range batch.Events {
			if len(e.Tags) > DefaultLimits.MaxTags || len(e.Metric) > DefaultLimits.MaxStringBytes {
				t.Fatal("limits not enforced")
			}
		}
		// What decodes must re-encode and decode to the same.
		again, err := EncodeBatch(batch)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeBatch(again, Limits{}); err != nil {
			t.Fatalf("re-encoded batch fails: %v", err)
		}
	})
}

func FuzzDecodeAck(f *testing.F) {
	a, _ := EncodeAck(&wirepb.Ack{FirstSeq: 1, LastSeq: 9, Reason: "ok"})
	seedFrames(f, a)
	f.Fuzz(func(t *testing.T, b []byte) { DecodeAck(b, Limits{}) })
}

func FuzzDecodeTime(f *testing.F) {
	r, _ := EncodeTimeRequest(&wirepb.TimeRequest{RequestId: 1, T1Ns: 5})
	p, _ := EncodeTimeResponse(&wirepb.TimeResponse{RequestId: 1, T1Ns: 5, T2Ns: 6, T3Ns: 7})
	seedFrames(f, r, p)
	f.Fuzz(func(t *testing.T, b []byte) {
		DecodeTimeRequest(b, Limits{})
		DecodeTimeResponse(b, Limits{})
	})
}

func FuzzDecodeStatus(f *testing.F) {
	s, _ := EncodeStatus(&wirepb.Status{DeviceId: "d", Online: true})
	seedFrames(f, s)
	f.Fuzz(func(t *testing.T, b []byte) { DecodeStatus(b, Limits{}) })
}

func FuzzParseTopic(f *testing.F) {
	f.Add("edge/v1/dev/batch")
	f.Add("edge/v1//batch")
	f.Fuzz(func(t *testing.T, s string) {
		dev, _, err := ParseTopic(s)
		if err == nil && ValidateDeviceID(dev) != nil {
			t.Fatal("accepted a bad device id")
		}
	})
}
