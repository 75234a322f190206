package hub

import (
	"bytes"
	"crypto/rand"
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"edgeflow/hub/batchview"
	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// rawBatch frames b's header with its events re-encoded by edit, so a test
// can send what proto.Marshal refuses to write (invalid UTF-8) or would
// take long to build (a million tags).
func rawBatch(t testing.TB, b *wirepb.Batch, edit func(i int, ev []byte) []byte) []byte {
	t.Helper()
	h, evs := splitBatch(t, b)
	for i := range evs {
		evs[i] = edit(i, evs[i])
	}
	body, err := wire.AppendRawEvents(h, evs)
	if err != nil {
		t.Fatal(err)
	}
	return wire.Frame(wire.MsgBatch, body)
}

// TestBatchesThatLie sends, through the embedded broker, batches that lie
// in every way the threat model lists. Each gets a clear answer with a
// reason, is counted, and the next good batch of the same stream is
// applied.
func TestBatchesThatLie(t *testing.T) {
	s := startHub(t, testOptions(t, t.TempDir()))
	url := "tcp://" + s.BrokerAddr()
	d := newDevice(t, url, "liar")
	next := uint64(1)
	good := func() {
		t.Helper()
		if ack := d.send(makeBatch("liar", d.stream, next, 20)); ack.Status != wirepb.AckStatus_ACK_STATUS_OK {
			t.Fatalf("good batch at %d after a bad one: %v", next, ack)
		}
		next += 20
	}
	good()
	refused := uint64(0) // events refused one by one
	year := func(y int) int64 { return time.Date(y, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano() }
	cases := []struct {
		name   string
		make   func() (first uint64, payload []byte)
		status wirepb.AckStatus
		reason batchview.Reason
		// refused: the batch is applied without its bad events, which the
		// ack lists with this reason (refusedN of them).
		refused  batchview.Reason
		refusedN uint64
	}{
		{"device in topic differs from payload", func() (uint64, []byte) {
			return next, encodeBatch(t, makeBatch("someone-else", d.stream, next, 5))
		}, wirepb.AckStatus_ACK_STATUS_REJECTED, batchview.ReasonDeviceMismatch, "", 0},
		{"sequence goes back (already applied)", func() (uint64, []byte) {
			return 1, encodeBatch(t, makeBatch("liar", d.stream, 1, 5))
		}, wirepb.AckStatus_ACK_STATUS_DUPLICATE, "", "", 0},
		{"sequence jumps by 2^63", func() (uint64, []byte) {
			return next + 1<<63, encodeBatch(t, makeBatch("liar", d.stream, next+1<<63, 5))
		}, wirepb.AckStatus_ACK_STATUS_REJECTED, batchview.ReasonSeqAhead, "", 0},
		{"sequence overflows uint64", func() (uint64, []byte) {
			return math.MaxUint64 - 1, encodeBatch(t, makeBatch("liar", d.stream, math.MaxUint64-1, 5))
		}, wirepb.AckStatus_ACK_STATUS_REJECTED, batchview.ReasonSeqOverflow, "", 0},
		{"first_seq 0", func() (uint64, []byte) {
			return 0, encodeBatch(t, makeBatch("liar", d.stream, 0, 5))
		}, wirepb.AckStatus_ACK_STATUS_REJECTED, batchview.ReasonFirstSeq, "", 0},
		{"timestamp in year 1", func() (uint64, []byte) {
			b := makeBatch("liar", d.stream, next, 5)
			b.Events[2].DeviceTimeNs = math.MinInt64 // year 1 is before int64 nanoseconds reach
			return next, encodeBatch(t, b)
		}, wirepb.AckStatus_ACK_STATUS_OK, "", batchview.ReasonTime, 1},
		{"timestamp in year 9999", func() (uint64, []byte) {
			b := makeBatch("liar", d.stream, next, 5)
			b.Events[2].DeviceTimeNs = math.MaxInt64 // year 2262, the largest; 9999 cannot be written
			b.Events[3].OffsetNs = year(2200) - baseTimeNs + 1
			return next, encodeBatch(t, b)
		}, wirepb.AckStatus_ACK_STATUS_OK, "", batchview.ReasonTime, 2},
		{"send time in year 1970", func() (uint64, []byte) {
			b := makeBatch("liar", d.stream, next, 5)
			b.SendTimeNs = 1
			return next, encodeBatch(t, b)
		}, wirepb.AckStatus_ACK_STATUS_REJECTED, batchview.ReasonTime, "", 0},
		{"NaN value", func() (uint64, []byte) {
			b := makeBatch("liar", d.stream, next, 5)
			b.Events[4].Value = math.NaN()
			return next, encodeBatch(t, b)
		}, wirepb.AckStatus_ACK_STATUS_OK, "", batchview.ReasonValue, 1},
		{"+Inf value", func() (uint64, []byte) {
			b := makeBatch("liar", d.stream, next, 5)
			b.Events[0].Value = math.Inf(1)
			return next, encodeBatch(t, b)
		}, wirepb.AckStatus_ACK_STATUS_OK, "", batchview.ReasonValue, 1},
		{"-Inf value", func() (uint64, []byte) {
			b := makeBatch("liar", d.stream, next, 5)
			b.Events[0].Value = math.Inf(-1)
			return next, encodeBatch(t, b)
		}, wirepb.AckStatus_ACK_STATUS_OK, "", batchview.ReasonValue, 1},
		{"invalid UTF-8 metric name", func() (uint64, []byte) {
			b := makeBatch("liar", d.stream, next, 5)
			b.Events[1].Metric = "BADNAME1"
			return next, rawBatch(t, b, func(_ int, ev []byte) []byte {
				return bytes.Replace(ev, []byte("BADNAME1"), []byte("BAD\xff\xfeME1"), 1)
			})
		}, wirepb.AckStatus_ACK_STATUS_OK, "", batchview.ReasonMetric, 1},
		{"invalid UTF-8 tag key", func() (uint64, []byte) {
			b := makeBatch("liar", d.stream, next, 5)
			b.Events[1].Tags[0].Key = "BADKEY12"
			return next, rawBatch(t, b, func(_ int, ev []byte) []byte {
				return bytes.Replace(ev, []byte("BADKEY12"), []byte("BA\xc3\x28EY12"), 1)
			})
		}, wirepb.AckStatus_ACK_STATUS_OK, "", batchview.ReasonTag, 1},
		{"invalid UTF-8 tag value", func() (uint64, []byte) {
			b := makeBatch("liar", d.stream, next, 5)
			b.Events[1].Tags[0].Value = "BADVAL12"
			return next, rawBatch(t, b, func(_ int, ev []byte) []byte {
				return bytes.Replace(ev, []byte("BADVAL12"), []byte("BA\xed\xa0\x80L12"), 1) // a surrogate
			})
		}, wirepb.AckStatus_ACK_STATUS_OK, "", batchview.ReasonTag, 1},
		{"empty metric name", func() (uint64, []byte) {
			b := makeBatch("liar", d.stream, next, 5)
			b.Events[1].Metric = ""
			return next, encodeBatch(t, b)
		}, wirepb.AckStatus_ACK_STATUS_OK, "", batchview.ReasonMetric, 1},
		{"a million tags", func() (uint64, []byte) {
			b := makeBatch("liar", d.stream, next, 5)
			tag, _ := proto.Marshal(&wirepb.Event{Tags: []*wirepb.Tag{{Key: "k", Value: "v"}}})
			return next, rawBatch(t, b, func(i int, ev []byte) []byte {
				if i != 0 {
					return ev
				}
				return append(ev, bytes.Repeat(tag, 1_000_000)...)
			})
		}, wirepb.AckStatus_ACK_STATUS_REJECTED, batchview.ReasonTooLarge, "", 0},
		{"more events than the limit", func() (uint64, []byte) {
			b := makeBatch("liar", d.stream, next, 1)
			ev, _ := proto.Marshal(&wirepb.Event{Metric: "m", DeviceTimeNs: baseTimeNs, Method: wirepb.TimeMethod_TIME_METHOD_NTP})
			h := proto.Clone(b).(*wirepb.Batch)
			h.Events = nil
			evs := make([][]byte, wire.DefaultLimits.MaxEvents+1)
			for i := range evs {
				evs[i] = ev
			}
			body, _ := wire.AppendRawEvents(h, evs)
			return next, wire.Frame(wire.MsgBatch, body)
		}, wirepb.AckStatus_ACK_STATUS_REJECTED, batchview.ReasonTooLarge, "", 0},
		{"garbage after a valid header", func() (uint64, []byte) {
			p := encodeBatch(t, makeBatch("liar", d.stream, next, 5))
			return next, append(p[:len(p)-3], 0xff, 0xff, 0xff)
		}, wirepb.AckStatus_ACK_STATUS_REJECTED, batchview.ReasonMalformed, "", 0},
	}
	for _, c := range cases {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			d.t = t
			defer func() { d.t = nil }()
			first, payload := c.make()
			before := counterValue(t, s.m.rejected.WithLabelValues(string(c.reason)))
			beforeRefused := counterValue(t, s.m.refused.WithLabelValues(string(c.refused)))
			d.forget(first)
			d.publish("", payload)
			ack := d.waitAck(first, 20*time.Second)
			if ack.Status != c.status || c.reason != "" && !strings.HasPrefix(ack.Reason, string(c.reason)+": ") {
				t.Fatalf("ack %v %q, want %v %s", ack.Status, ack.Reason, c.status, c.reason)
			}
			if c.reason != "" {
				if after := counterValue(t, s.m.rejected.WithLabelValues(string(c.reason))); after != before+1 {
					t.Fatalf("rejected{reason=%s} went %v -> %v", c.reason, before, after)
				}
			}
			if c.refused != "" {
				if len(ack.Refused) != 1 || ack.Refused[0].Reason != string(c.refused) || ack.RefusedEvents != c.refusedN {
					t.Fatalf("ack refused %v, want %d events for %s", ack.Refused, c.refusedN, c.refused)
				}
				if after := counterValue(t, s.m.refused.WithLabelValues(string(c.refused))); after != beforeRefused+float64(c.refusedN) {
					t.Fatalf("refused_events{reason=%s} went %v -> %v", c.refused, beforeRefused, after)
				}
				next += 5
				refused += c.refusedN
			}
			good()
		})
	}

	// A 10 MB payload: beyond the broker's packet limit, so the broker
	// drops the connection that sent it (counted); the device's other
	// connection, and its stream, carry on.
	t.Run("10_MB_payload", func(t *testing.T) {
		d.t = t
		big := make([]byte, 10<<20)
		_, _ = rand.Read(big)
		c, err := mqttClient(t, url, "liar-2", "", "", nil, "")
		if err != nil {
			t.Fatal(err)
		}
		c.Publish(wire.BatchTopic("liar"), 1, false, big).WaitTimeout(5 * time.Second)
		waitFor(t, func() bool { return brokerCounter(t, s, "protocol_disconnects_total", "why", "packet_too_large") == 1 })
		good()
	})
	if n := counterValue(t, s.m.panics); n != 0 {
		t.Fatalf("%v recovered panics", n)
	}
	// The registry is the applier's, which runs after the ack: wait for it.
	waitFor(t, func() bool {
		info, _ := s.Device("liar")
		return len(info.Streams) == 1 && info.Streams[0].Events == next-1-refused && info.Streams[0].RefusedEvents == refused
	})
}
