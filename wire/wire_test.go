package wire

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"edgeflow/wire/wirepb"
)

func sampleBatch(n int) *wirepb.Batch {
	id := NewStreamID()
	b := &wirepb.Batch{DeviceId: "dev-1", StreamId: id[:], FirstSeq: 10, SendTimeNs: 1_800_000_000_000_000_000,
		Gaps:    []*wirepb.Gap{{FirstSeq: 1, LastSeq: 9, Reason: "max_bytes"}},
		Backlog: &wirepb.Backlog{Events: 5, Bytes: 200}}
	for i := 0; i < n; i++ {
		b.Events = append(b.Events, &wirepb.Event{Metric: "temp", Value: float64(i), DeviceTimeNs: int64(i), BootId: "boot",
			Tags: []*wirepb.Tag{{Key: "room", Value: "kitchen"}}, Method: wirepb.TimeMethod_TIME_METHOD_NTP})
	}
	return b
}

func TestBatchRoundTrip(t *testing.T) {
	for _, n := range []int{1, 3, 1000} {
		in := sampleBatch(n)
		frame, err := EncodeBatch(in)
		if err != nil {
			t.Fatal(err)
		}
		if n == 1000 && Codec(frame[2]) != CodecZstd {
			t.Fatalf("a 1000-event batch was not compressed")
		}
		if n == 1 && Codec(frame[2]) != CodecNone {
			t.Fatalf("a tiny batch was compressed")
		}
		out, err := DecodeBatch(frame, Limits{})
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(in, out) {
			t.Fatalf("round trip of %d events differs", n)
		}
	}
}

// TestCodecs checks that a batch framed with each codec decodes to the
// same batch, that each compressing codec compresses a large one, and that
// codec names round-trip through ParseCodec.
func TestCodecs(t *testing.T) {
	in := sampleBatch(1000)
	body, err := proto.MarshalOptions{Deterministic: true}.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []Codec{CodecNone, CodecZstd, CodecS2, CodecColumns} {
		frame := FrameWith(MsgBatch, c, body)
		if Codec(frame[2]) != c {
			t.Fatalf("%v: frame says codec %v", c, Codec(frame[2]))
		}
		if c != CodecNone && len(frame) > len(body)/2 {
			t.Fatalf("%v: %d bytes framed to %d", c, len(body), len(frame))
		}
		out, err := DecodeBatch(frame, Limits{})
		if err != nil {
			t.Fatalf("%v: %v", c, err)
		}
		if !proto.Equal(in, out) {
			t.Fatalf("%v: round trip differs", c)
		}
		if p, err := ParseCodec(c.String()); err != nil || p != c {
			t.Fatalf("ParseCodec(%q) = %v, %v", c.String(), p, err)
		}
	}
	if _, err := ParseCodec("gzip"); err == nil || !strings.Contains(err.Error(), "gzip") {
		t.Fatalf("ParseCodec(gzip): %v", err)
	}
	if f := FrameWith(MsgBatch, CodecS2, body[:100]); Codec(f[2]) != CodecNone {
		t.Fatal("a tiny body was compressed")
	}
}

// TestRawEventsMatchEncoded checks that a batch built from stored event
// records decodes to the same batch as one marshalled whole.
func TestRawEventsMatchEncoded(t *testing.T) {
	in := sampleBatch(50)
	var raw [][]byte
	for _, e := range in.Events {
		b, _ := proto.Marshal(e)
		raw = append(raw, b)
	}
	hdr := proto.Clone(in).(*wirepb.Batch)
	hdr.Events = nil
	body, err := AppendRawEvents(hdr, raw)
	if err != nil {
		t.Fatal(err)
	}
	out, err := DecodeBatch(Frame(MsgBatch, body), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(in, out) {
		t.Fatal("raw-built batch differs")
	}
}

func TestDecodeRejects(t *testing.T) {
	good, _ := EncodeBatch(sampleBatch(3))
	ack, _ := EncodeAck(&wirepb.Ack{FirstSeq: 1, LastSeq: 2})
	many := sampleBatch(0)
	for i := 0; i < 20; i++ {
		many.Events = append(many.Events, &wirepb.Event{})
	}
	manyFrame, _ := EncodeBatch(many)
	tags := sampleBatch(1)
	for i := 0; i < 100; i++ {
		tags.Events[0].Tags = append(tags.Events[0].Tags, &wirepb.Tag{Key: "k"})
	}
	tagsFrame, _ := EncodeBatch(tags)
	long := sampleBatch(1)
	long.Events[0].Metric = strings.Repeat("m", 1000)
	longFrame, _ := EncodeBatch(long)
	bomb := append([]byte{frameMagic, SchemaVersion, byte(CodecZstd), byte(MsgBatch)}, 0xff, 0xff, 0xff, 0xff, 0x7f)
	lied := Frame(MsgBatch, bytes.Repeat([]byte{0}, 4096))
	lied[4] = 0x01 // declared length 1, real 4096
	s2Bomb := append([]byte{frameMagic, SchemaVersion, byte(CodecS2), byte(MsgBatch)}, 0xff, 0xff, 0xff, 0xff, 0x0f)
	s2Lied := FrameWith(MsgBatch, CodecS2, bytes.Repeat([]byte{0}, 4096))
	s2Lied[4] = 0x01
	cases := []struct {
		name    string
		payload []byte
		lim     Limits
		want    error
	}{
		{"empty", nil, Limits{}, ErrMalformed},
		{"bad magic", append([]byte{0}, good[1:]...), Limits{}, ErrMalformed},
		{"future version", append([]byte{frameMagic, 9}, good[2:]...), Limits{}, ErrVersion},
		{"wrong kind", ack, Limits{}, ErrMalformed},
		{"unknown codec", append([]byte{frameMagic, SchemaVersion, 7}, good[3:]...), Limits{}, ErrMalformed},
		{"oversize frame", good, Limits{MaxFrameBytes: 10}, ErrTooLarge},
		{"too many events", manyFrame, Limits{MaxEvents: 10}, ErrTooLarge},
		{"too many tags", tagsFrame, Limits{}, ErrTooLarge},
		{"long metric", longFrame, Limits{}, ErrTooLarge},
		{"decompression bomb header", bomb, Limits{}, ErrTooLarge},
		{"length lie", lied, Limits{}, ErrMalformed},
		{"s2 bomb header", s2Bomb, Limits{}, ErrTooLarge},
		{"s2 length lie", s2Lied, Limits{}, ErrMalformed},
		{"truncated body", good[:len(good)-3], Limits{}, ErrMalformed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := DecodeBatch(c.payload, c.lim)
			if !errors.Is(err, c.want) {
				t.Fatalf("want %v, got %v", c.want, err)
			}
		})
	}
}

func TestSmallMessages(t *testing.T) {
	id := NewStreamID()
	a := &wirepb.Ack{StreamId: id[:], FirstSeq: 1, LastSeq: 1000, Status: wirepb.AckStatus_ACK_STATUS_REJECTED, Reason: "device mismatch"}
	f, _ := EncodeAck(a)
	got, err := DecodeAck(f, Limits{})
	if err != nil || !proto.Equal(a, got) {
		t.Fatalf("ack: %v %v", got, err)
	}
	req := &wirepb.TimeRequest{RequestId: 7, T1Ns: 123}
	f, _ = EncodeTimeRequest(req)
	if got, err := DecodeTimeRequest(f, Limits{}); err != nil || !proto.Equal(req, got) {
		t.Fatalf("time req: %v", err)
	}
	resp := &wirepb.TimeResponse{RequestId: 7, T1Ns: 1, T2Ns: 2, T3Ns: 3}
	f, _ = EncodeTimeResponse(resp)
	if got, err := DecodeTimeResponse(f, Limits{}); err != nil || !proto.Equal(resp, got) {
		t.Fatalf("time resp: %v", err)
	}
	st := &wirepb.Status{DeviceId: "d", Online: true, Backlog: &wirepb.Backlog{Events: 3}}
	f, _ = EncodeStatus(st)
	if got, err := DecodeStatus(f, Limits{}); err != nil || !proto.Equal(st, got) {
		t.Fatalf("status: %v", err)
	}
	big := &wirepb.Ack{Reason: strings.Repeat("x", 10000)}
	f, _ = EncodeAck(big)
	if _, err := DecodeAck(f, Limits{}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversize ack: %v", err)
	}
}

func TestTopics(t *testing.T) {
	dev, kind, err := ParseTopic(TimeReqTopic("pump-7"))
	if err != nil || dev != "pump-7" || kind != KindTimeReq {
		t.Fatalf("%q %q %v", dev, kind, err)
	}
	for _, bad := range []string{"edge/v1/", "edge/v1/dev", "edge/v2/d/batch", "edge/v1/d/unknown", "edge/v1/a+b/batch", "edge/v1/" + strings.Repeat("d", 200) + "/batch"} {
		if _, _, err := ParseTopic(bad); err == nil {
			t.Errorf("ParseTopic(%q) accepted", bad)
		}
	}
}

// TestStatusBufferCompat: a status with the buffer field round-trips; its
// other fields encode exactly as in a status without it (what an agent
// that does not report its buffer sends), so a reader that skips field 9
// sees the same status; and such an older status decodes with no buffer.
func TestStatusBufferCompat(t *testing.T) {
	old := &wirepb.Status{DeviceId: "d", Online: true, Backlog: &wirepb.Backlog{Events: 3, Bytes: 120}, TimeNs: 5, Version: "v", Connection: 9}
	cur := proto.Clone(old).(*wirepb.Status)
	cur.Buffer = &wirepb.BufferFill{CapacityBytes: 1 << 20, UsedBytes: 1 << 19, FillRate: -12.5, RateIntervalNs: int64(time.Minute)}
	f, err := EncodeStatus(cur)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeStatus(f, Limits{})
	if err != nil || !proto.Equal(cur, got) {
		t.Fatalf("status with buffer: %v %v", got, err)
	}
	body, err := proto.MarshalOptions{Deterministic: true}.Marshal(cur)
	if err != nil {
		t.Fatal(err)
	}
	var rest []byte // body without field 9, as a reader that skips it sees it
	for b := body; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			t.Fatalf("bad tag at %x", b)
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			t.Fatalf("bad field %d at %x", num, b)
		}
		if num != 9 {
			rest = append(rest, b[:n+m]...)
		}
		b = b[n+m:]
	}
	want, _ := proto.MarshalOptions{Deterministic: true}.Marshal(old)
	if !bytes.Equal(rest, want) {
		t.Fatalf("without field 9: %x\nolder status:      %x", rest, want)
	}
	f, _ = EncodeStatus(old)
	if got, err := DecodeStatus(f, Limits{}); err != nil || got.GetBuffer() != nil {
		t.Fatalf("older status: %v %v", got, err)
	}
}
