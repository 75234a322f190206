package uplink

import (
	"bytes"
	"testing"
	"time"

	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// FuzzAckHandler feeds arbitrary payloads to the ack handler with batches
// in flight. It must never panic, and it may advance the buffer only for a
// well-formed answer of this stream that names a batch in flight exactly,
// or, OK or DUPLICATE, a run of them.
func FuzzAckHandler(f *testing.F) {
	_, st := openStream(f, "dev-fuzz")
	appendEvents(f, st, 40, 40)
	u, err := New(st, Options{DeviceID: "dev-fuzz", Brokers: []string{"tcp://127.0.0.1:1"}, Logger: quietLogger()})
	if err != nil {
		f.Fatal(err)
	}
	sid := st.ID()
	seed := func(a *wirepb.Ack) []byte { b, _ := wire.EncodeAck(a); return b }
	f.Add([]byte{})
	f.Add([]byte{0xE7, 1, 0, 2})
	f.Add(seed(&wirepb.Ack{StreamId: make([]byte, 16), FirstSeq: 1, LastSeq: 10, Status: wirepb.AckStatus_ACK_STATUS_OK}))
	f.Add(seed(&wirepb.Ack{StreamId: sid[:], FirstSeq: 1, LastSeq: 9, Status: wirepb.AckStatus_ACK_STATUS_OK}))
	f.Add(seed(&wirepb.Ack{StreamId: sid[:], FirstSeq: 11, LastSeq: 20, Status: wirepb.AckStatus_ACK_STATUS_REJECTED, Reason: "x"}))
	f.Add(seed(&wirepb.Ack{StreamId: sid[:], FirstSeq: 1, LastSeq: 10, Status: 7}))
	f.Add(seed(&wirepb.Ack{StreamId: sid[:], FirstSeq: 1, LastSeq: 10, Status: wirepb.AckStatus_ACK_STATUS_UNSPECIFIED}))
	f.Add(seed(&wirepb.Ack{StreamId: sid[:], FirstSeq: 1, LastSeq: 10, Status: wirepb.AckStatus_ACK_STATUS_RETRY_LATER, RetryAfterNs: 1e9}))
	f.Add(seed(&wirepb.Ack{StreamId: sid[:], FirstSeq: 1, LastSeq: 20, Status: wirepb.AckStatus_ACK_STATUS_OK}))
	f.Add(seed(&wirepb.Ack{StreamId: sid[:], FirstSeq: 1, LastSeq: 40, Status: wirepb.AckStatus_ACK_STATUS_DUPLICATE}))
	f.Add(seed(&wirepb.Ack{StreamId: sid[:], FirstSeq: 1, LastSeq: 30, Status: wirepb.AckStatus_ACK_STATUS_OK}))
	f.Add(seed(&wirepb.Ack{StreamId: sid[:], FirstSeq: 1, LastSeq: 20, Status: wirepb.AckStatus_ACK_STATUS_REJECTED, Reason: "x"}))
	f.Fuzz(func(t *testing.T, payload []byte) {
		u.win = window{}
		u.unreported, u.answeredTo, u.bufAcked = nil, 0, 0
		for _, r := range [][2]uint64{{1, 10}, {11, 20}, {21, 40}} {
			u.win.push(&flight{first: r[0], last: r[1], sends: 1, sent: time.Now()})
		}
		// onAck is what the send loop calls; whatever it hands to the
		// acker (this channel) is what the buffer would be acked through.
		acks := make(chan uint64, 1)
		u.onAck(payload, acks)
		var upTo uint64
		ok := false
		select {
		case upTo = <-acks:
			ok = true
		default:
		}
		a, err := wire.DecodeAck(payload, wire.Limits{})
		exact := err == nil && a.FirstSeq == 1 && a.LastSeq == 10 &&
			a.Status >= wirepb.AckStatus_ACK_STATUS_OK && a.Status <= wirepb.AckStatus_ACK_STATUS_REJECTED
		run := err == nil && a.FirstSeq == 1 && (a.LastSeq == 20 || a.LastSeq == 40) &&
			(a.Status == wirepb.AckStatus_ACK_STATUS_OK || a.Status == wirepb.AckStatus_ACK_STATUS_DUPLICATE)
		legit := err == nil && bytes.Equal(a.StreamId, sid[:]) && (exact || run)
		if legit && a.Status == wirepb.AckStatus_ACK_STATUS_REJECTED {
			// A batch rejected whole frees nothing until a later batch has
			// reported its range to the hub (gaps.go): it is recorded.
			if ok || len(u.unreported) != 1 || u.unreported[0].First != 1 || u.unreported[0].Last != 10 {
				t.Fatalf("rejection of 1..10: acked %v through %d, unreported %v", ok, upTo, u.unreported)
			}
			return
		}
		switch {
		case ok && !legit:
			t.Fatalf("payload %x would ack the buffer through %d", payload, upTo)
		case ok && upTo != a.LastSeq:
			t.Fatalf("legit answer for %d..%d would ack through %d", a.FirstSeq, a.LastSeq, upTo)
		case legit && !ok:
			t.Fatalf("legit answer for %d..%d acked nothing", a.FirstSeq, a.LastSeq)
		}
	})
}
