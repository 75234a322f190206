package hub

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"edgeflow/hub/api"
	"edgeflow/hub/batchview"
	"edgeflow/hub/ranges"
	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// refusingBatch is a batch of 20 events (seq first..first+19) with bad
// events the hub can isolate: two NaN values (indexes 3, 4), a trusted
// time in 1985 (7), a metric that is not valid UTF-8 (10) and an unknown
// time method (12). It returns the frame and the refusals the ack must list.
func refusingBatch(t *testing.T, device string, stream wire.StreamID, first uint64) ([]byte, []*wirepb.Gap) {
	t.Helper()
	b := makeBatch(device, stream, first, 20)
	b.Events[3].Value, b.Events[4].Value = nan(), nan()
	b.Events[7].DeviceTimeNs = time.Date(1985, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	b.Events[10].Metric = "badname"
	b.Events[12].Method = 42
	frame := rawBatch(t, b, func(i int, ev []byte) []byte {
		return bytes.Replace(ev, []byte("badname"), []byte("bad\xffame"), 1)
	})
	want := []*wirepb.Gap{
		{FirstSeq: first + 3, LastSeq: first + 4, Reason: "bad_value"},
		{FirstSeq: first + 7, LastSeq: first + 7, Reason: "bad_time"},
		{FirstSeq: first + 10, LastSeq: first + 10, Reason: "bad_metric"},
		{FirstSeq: first + 12, LastSeq: first + 12, Reason: "bad_method"},
	}
	return frame, want
}

func sameGaps(a, b []*wirepb.Gap) bool {
	return slices.EqualFunc(a, b, func(x, y *wirepb.Gap) bool {
		return x.FirstSeq == y.FirstSeq && x.LastSeq == y.LastSeq && x.Reason == y.Reason
	})
}

// TestRefusedEventsApplyTheRest: a batch with events the hub can isolate
// is applied without them. The ack is OK and names each refused run with
// its reason; the registry shows them as gaps with reason and as refused
// ranges; the metric counts them; a redelivery is DUPLICATE; a crash
// replay and a rebuild give the same state, aggregates included.
func TestRefusedEventsApplyTheRest(t *testing.T) {
	dir := t.TempDir()
	cc := newCountingConsumer()
	opts := func() Options {
		o := aggTestOptions(t, dir)
		o.Consumers = []Consumer{cc}
		return o
	}
	s1 := startHub(t, opts())
	d := newDevice(t, "tcp://"+s1.BrokerAddr(), "refuser")
	if a := d.send(makeBatch(d.id, d.stream, 1, 10)); a.Status != wirepb.AckStatus_ACK_STATUS_OK {
		t.Fatalf("first batch: %v", a)
	}
	frame, want := refusingBatch(t, d.id, d.stream, 11)
	d.forget(11)
	d.publish("", frame)
	a := d.waitAck(11, 10*time.Second)
	if a.Status != wirepb.AckStatus_ACK_STATUS_OK || a.LastSeq != 30 || !sameGaps(a.Refused, want) || a.RefusedEvents != 5 {
		t.Fatalf("ack of the batch with bad events: %v", a)
	}
	d.forget(11)
	d.publish("", frame)
	if a := d.waitAck(11, 10*time.Second); a.Status != wirepb.AckStatus_ACK_STATUS_DUPLICATE || !sameGaps(a.Refused, want) {
		t.Fatalf("redelivery: %v", a)
	}
	if a := d.send(makeBatch(d.id, d.stream, 31, 10)); a.Status != wirepb.AckStatus_ACK_STATUS_OK || len(a.Refused) != 0 {
		t.Fatalf("next batch: %v", a)
	}
	waitApplied(t, s1)
	info, _ := s1.Device(d.id)
	st := info.Streams[0]
	wantRefused := []ranges.SeqRange{{First: 14, Last: 15}, {First: 18, Last: 18}, {First: 21, Last: 21}, {First: 23, Last: 23}}
	if st.Events != 35 || !slices.Equal(st.Refused.Ranges(), wantRefused) || st.RefusedEvents != 5 ||
		!slices.Equal(st.Gaps.Ranges(), wantRefused) || st.GapEvents != 5 ||
		fmt.Sprint(st.GapReasons) != "map[refused:bad_method:1 refused:bad_metric:1 refused:bad_time:1 refused:bad_value:2]" {
		t.Fatalf("stream: %+v", st)
	}
	if st.Applied.Covers(14, 14) || !st.Applied.Covers(1, 13) || !st.Applied.Covers(24, 40) {
		t.Fatalf("applied ranges %v", st.Applied.Ranges())
	}
	for reason, n := range map[string]float64{"bad_value": 2, "bad_time": 1, "bad_metric": 1, "bad_method": 1, "bad_tag": 0} {
		if got := counterValue(t, s1.m.refused.WithLabelValues(reason)); got != n {
			t.Fatalf("refused_events_total{reason=%q} = %v, want %v", reason, got, n)
		}
	}
	cc.mu.Lock()
	for _, c := range cc.Streams {
		if c.Events != 35 || c.Twice != 0 || c.Seen.Covers(14, 14) {
			t.Fatalf("consumer: %+v", *c)
		}
	}
	cc.mu.Unlock()
	// The stored events leave the refused ones out.
	from, to := time.Unix(0, baseTimeNs-int64(time.Hour)), time.Unix(0, baseTimeNs+int64(time.Hour))
	evs, err := s1.storedEvents(context.Background(), api.EventsQuery{Device: d.id, From: from, To: to, Limit: 100, Arrival: time.Since(to) + time.Hour})
	if err != nil || len(evs.Events) != 35 {
		t.Fatalf("/v1/events: %d events", len(evs.Events))
	}
	if err := s1.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	frame2, _ := refusingBatch(t, d.id, d.stream, 41) // after the checkpoint: replayed
	d.forget(41)
	d.publish("", frame2)
	if a := d.waitAck(41, 10*time.Second); len(a.Refused) != 4 {
		t.Fatalf("ack %v", a)
	}
	waitApplied(t, s1)

	// A crash replays the entries after the checkpoint to the same state.
	cc = newCountingConsumer()
	_, s2 := crashAndRecover(t, s1, opts())
	if err := s2.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	before := engineCheckpoint(t, dir)
	if _, err := Rebuild(context.Background(), aggTestOptions(t, dir)); err != nil {
		t.Fatal(err)
	}
	_, b1, _ := splitAggSnapshot(before)
	_, b2, _ := splitAggSnapshot(engineCheckpoint(t, dir))
	if !bytes.Equal(b1, b2) {
		t.Fatal("rebuilt engine state differs from live ingest's")
	}
}

// TestRefusedRunsBound: a batch whose refused events form more runs than
// maxRefusedRuns is rejected whole, naming the first fault.
func TestRefusedRunsBound(t *testing.T) {
	lim := limitsWithDefaults(wire.Limits{})
	b := makeBatch("d1", wire.NewStreamID(), 1, 2*batchview.MaxRefusedRuns+4)
	for i := 0; i < len(b.Events); i += 2 {
		b.Events[i].Value = nan()
	}
	var v batchview.View
	err := batchview.ParseBatchFrame(&v, encodeBatch(t, b), lim)
	if err == nil {
		err = batchview.ValidateBatch(&v, "d1")
	}
	if r := batchview.AsRejection(err); err == nil || r.Reason != batchview.ReasonValue {
		t.Fatalf("got %v", err)
	}
}
