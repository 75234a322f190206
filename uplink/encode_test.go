package uplink

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"edgeflow/buffer"
	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// TestBatchHeaderAndRetime reads a batch from a stream that dropped its
// oldest events and checks the header (device, stream, first seq, send
// time from the injected clock, gaps, backlog, clock estimate), that the
// batch stops at the buffer's first record after the gap, and that Retime
// is applied (and its failures send the event as stored).
func TestBatchHeaderAndRetime(t *testing.T) {
	s, err := buffer.Open(t.TempDir(), buffer.Options{Logger: quietLogger(), Durability: buffer.DurabilityNone, MaxBlockBytes: 1 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	st, err := s.Stream("dev-hdr", buffer.StreamOptions{MaxBytes: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	for range 20 { // about 8 KiB into a 4 KiB stream: the oldest blocks go
		appendEvents(t, st, 10, 10)
	}
	gaps := st.Gaps()
	if len(gaps) == 0 {
		t.Fatal("setup: no gap")
	}
	clock := &wirepb.ClockEstimate{OffsetNs: 1234, UncertaintyNs: 50, Method: wirepb.TimeMethod_TIME_METHOD_NTP}
	sendTime := time.Date(2025, 6, 1, 13, 0, 0, 0, time.UTC)
	u, err := New(st, Options{
		DeviceID: "dev-hdr", Brokers: []string{"tcp://127.0.0.1:1"}, Logger: quietLogger(),
		MaxBatchEvents: 15, Linger: NoLinger,
		Now:   func() time.Time { return sendTime },
		Clock: func() *wirepb.ClockEstimate { return clock },
		Retime: func(rec []byte) ([]byte, error) {
			var e wirepb.Event
			if err := proto.Unmarshal(rec, &e); err != nil {
				return nil, err
			}
			if uint64(e.Value)%2 == 0 {
				return nil, errors.New("cannot repair")
			}
			e.Method = wirepb.TimeMethod_TIME_METHOD_REPAIRED
			return proto.Marshal(&e)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	u.next = 1
	f, err := u.readBatch(time.Now())
	if err != nil || f == nil {
		t.Fatalf("read batch: %v %v", f, err)
	}
	b, err := wire.DecodeBatch(f.payload, wire.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	head := st.Stats().Head
	sid := st.ID()
	if b.DeviceId != "dev-hdr" || string(b.StreamId) != string(sid[:]) || b.FirstSeq != head || b.SendTimeNs != sendTime.UnixNano() {
		t.Fatalf("header: device %q first %d (head %d) send %d", b.DeviceId, b.FirstSeq, head, b.SendTimeNs)
	}
	if len(b.Events) != 15 || f.first != head || f.last != head+14 || u.next != head+15 {
		t.Fatalf("batch %d..%d with %d events, next %d", f.first, f.last, len(b.Events), u.next)
	}
	if len(b.Gaps) != len(gaps) || b.Gaps[0].FirstSeq != gaps[0].First || b.Gaps[0].LastSeq != gaps[0].Last || b.Gaps[0].Reason != buffer.ReasonMaxBytes {
		t.Fatalf("gaps %v, stream has %v", b.Gaps, gaps)
	}
	if stats := st.Stats(); b.Backlog.GetEvents() != stats.Depth || b.Backlog.GetBytes() != uint64(stats.Bytes) || b.Backlog.GetOldestNs() == 0 {
		t.Fatalf("backlog %v, stream %+v", b.Backlog, stats)
	}
	if !proto.Equal(b.Clock, clock) {
		t.Fatalf("clock %v", b.Clock)
	}
	for i, e := range b.Events {
		seq := b.FirstSeq + uint64(i)
		want := wirepb.TimeMethod_TIME_METHOD_REPAIRED
		if seq%2 == 0 {
			want = wirepb.TimeMethod_TIME_METHOD_NTP // retime failed: as stored
		}
		if e.Value != float64(seq) || e.Method != want {
			t.Fatalf("event %d: value %v method %v, want method %v", seq, e.Value, e.Method, want)
		}
	}
	if got := value(u.m.RetimeErrors); got < 7 {
		t.Fatalf("retime errors %v", got)
	}
}
