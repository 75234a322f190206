package hub

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"edgeflow/hub/batchview"
	"edgeflow/hub/hublog"
	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// streamCapOptions are options for successive hubs on one directory with
// a fake clock, the aggregate engine and a counting consumer.
func streamCapOptions(t *testing.T, max int, expiry time.Duration) (func() Options, *fakeNow, string) {
	dir := t.TempDir()
	clock := &fakeNow{t: time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)}
	return func() Options {
		o := aggTestOptions(t, dir)
		o.Now, o.Consumers = clock.now, []Consumer{newCountingConsumer()}
		o.MaxStreamsPerDevice, o.StreamIdleExpiry = max, expiry
		return o
	}, clock, dir
}

// sendOn sends a batch of 5 events at first on stream id of d.
func sendOn(d *device, id wire.StreamID, first uint64) *wirepb.Ack {
	d.t.Helper()
	return d.send(makeBatch(d.id, id, first, 5))
}

func wantAck(t *testing.T, what string, a *wirepb.Ack, status wirepb.AckStatus) {
	t.Helper()
	if a.Status != status {
		t.Fatalf("%s: ack %v, want %v", what, a, status)
	}
}

// wantStreams checks the registry, the dedup state, the stored ranges
// keys and the engine hold exactly want for device.
func wantStreams(t *testing.T, s *Server, device string, want ...wire.StreamID) {
	t.Helper()
	waitApplied(t, s)
	info, _ := s.Device(device)
	var got []string
	for _, st := range info.Streams {
		got = append(got, st.StreamID)
	}
	var ws []string
	for _, id := range want {
		ws = append(ws, id.String())
	}
	if strings.Join(got, ",") != strings.Join(sortedStrings(ws), ",") || info.StreamCount != len(want) {
		t.Fatalf("registry streams %v (count %d), want %v", got, info.StreamCount, ws)
	}
	if n := countDeviceRanges(t, s, device); n != len(want) {
		t.Fatalf("%d ranges keys, want %d", n, len(want))
	}
	if n := len(s.com.cap.byDevice[device]); n != len(want) {
		t.Fatalf("committer holds %d streams of %s, want %d", n, device, len(want))
	}
	var eng []string
	for _, st := range s.Engine().Streams() {
		if st.Device == device {
			eng = append(eng, wire.StreamID(st.Stream).String())
		}
	}
	if strings.Join(sortedStrings(eng), ",") != strings.Join(sortedStrings(ws), ",") {
		t.Fatalf("engine streams %v, want %v", eng, ws)
	}
}

func sortedStrings(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

func gaugeValue(t testing.TB, g prometheus.Gauge) float64 {
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}

// TestStreamsPerDeviceCap: a device at max-streams-per-device gets
// RETRY_LATER too_many_streams with a retry_after for a batch that would
// open one more stream, and nothing of it is stored; its open streams
// still take new batches, and a redelivery is still DUPLICATE.
func TestStreamsPerDeviceCap(t *testing.T) {
	opts, _, _ := streamCapOptions(t, 3, 10*time.Hour)
	s := startHub(t, opts())
	d := newDevice(t, "tcp://"+s.BrokerAddr(), "capped")
	other := newDevice(t, "tcp://"+s.BrokerAddr(), "other")
	ids := []wire.StreamID{wire.NewStreamID(), wire.NewStreamID(), wire.NewStreamID()}
	for i, id := range ids {
		wantAck(t, "stream "+id.String(), sendOn(d, id, uint64(1+10*i)), wirepb.AckStatus_ACK_STATUS_OK)
	}
	for i := 0; i < 5; i++ {
		a := sendOn(d, wire.NewStreamID(), 100+uint64(i))
		wantAck(t, "a fourth stream", a, wirepb.AckStatus_ACK_STATUS_RETRY_LATER)
		if !strings.HasPrefix(a.Reason, string(batchview.ReasonTooManyStreams)+": ") || a.RetryAfterNs <= 0 || a.RetryAfterNs > int64(10*time.Hour) {
			t.Fatalf("refusal: reason %q retry_after_ns %d", a.Reason, a.RetryAfterNs)
		}
	}
	wantAck(t, "redelivery on an open stream", sendOn(d, ids[1], 11), wirepb.AckStatus_ACK_STATUS_DUPLICATE)
	wantAck(t, "next batch on an open stream", sendOn(d, ids[2], 26), wirepb.AckStatus_ACK_STATUS_OK)
	wantAck(t, "another device", sendOn(other, other.stream, 1), wirepb.AckStatus_ACK_STATUS_OK)
	wantStreams(t, s, d.id, ids...)
	if got := counterValue(t, s.m.rejected.WithLabelValues(string(batchview.ReasonTooManyStreams))); got != 5 {
		t.Fatalf("rejected_batches_total{reason=too_many_streams} = %v, want 5", got)
	}
	if got := gaugeValue(t, s.m.streams); got != 4 {
		t.Fatalf("edgeflow_hub_streams = %v, want 4", got)
	}
	info, _ := s.Device(d.id)
	if info.MaxStreams != 3 {
		t.Fatalf("max_streams %d", info.MaxStreams)
	}
	var events uint64
	for _, st := range info.Streams {
		events += st.Events
	}
	if events != 20 {
		t.Fatalf("%d events applied, want 20", events)
	}
}

// TestStreamRetireAfterIdleExpiry: a stream with no batch for the expiry
// (hub clock) is retired and the device may open a new one; the
// retirement and the streams' last-seen times survive a crash (replay
// from a checkpoint) and a rebuild gives the live engine state.
func TestStreamRetireAfterIdleExpiry(t *testing.T) {
	opts, clock, dir := streamCapOptions(t, 2, time.Hour)
	s1 := startHub(t, opts())
	d := newDevice(t, "tcp://"+s1.BrokerAddr(), "reflashed")
	a, b, c, e := wire.NewStreamID(), wire.NewStreamID(), wire.NewStreamID(), wire.NewStreamID()
	wantAck(t, "a", sendOn(d, a, 1), wirepb.AckStatus_ACK_STATUS_OK)
	wantAck(t, "b", sendOn(d, b, 1), wirepb.AckStatus_ACK_STATUS_OK)
	wantAck(t, "c at the bound", sendOn(d, c, 1), wirepb.AckStatus_ACK_STATUS_RETRY_LATER)
	waitApplied(t, s1)
	if err := s1.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	clock.add(30 * time.Minute)
	wantAck(t, "b again", sendOn(d, b, 6), wirepb.AckStatus_ACK_STATUS_OK)
	clock.add(40 * time.Minute) // a idle 70m, b 40m
	wantAck(t, "c after a expired", sendOn(d, c, 1), wirepb.AckStatus_ACK_STATUS_OK)
	wantStreams(t, s1, d.id, b, c)
	if got := counterValue(t, s1.m.streamsRetired); got != 1 {
		t.Fatalf("streams_retired_total = %v, want 1", got)
	}
	// a's ranges are gone: its first batch again opens a new stream, and
	// the device is at its bound.
	wantAck(t, "a after retirement", sendOn(d, a, 1), wirepb.AckStatus_ACK_STATUS_RETRY_LATER)

	// A crash replays the retirement after the checkpoint to the same state.
	_, s2 := crashAndRecover(t, s1, opts())
	d2 := newDevice(t, "tcp://"+s2.BrokerAddr(), "reflashed")
	wantStreams(t, s2, d.id, b, c)
	wantAck(t, "redelivery of c", sendOn(d2, c, 1), wirepb.AckStatus_ACK_STATUS_DUPLICATE)
	wantAck(t, "e at the bound after restart", sendOn(d2, e, 1), wirepb.AckStatus_ACK_STATUS_RETRY_LATER)
	// b's last batch was 40m before the crash: 25m more expire it, not c
	// (15m later than b): the last-seen times survived the restart.
	clock.add(25 * time.Minute)
	wantAck(t, "e after b expired", sendOn(d2, e, 1), wirepb.AckStatus_ACK_STATUS_OK)
	wantStreams(t, s2, d.id, c, e)
	if err := s2.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	_, s3 := crashAndRecover(t, s2, opts())
	wantStreams(t, s3, d.id, c, e)
	if err := s3.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	before := engineCheckpoint(t, dir)
	o := aggTestOptions(t, dir)
	o.Now = clock.now
	if _, err := Rebuild(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	_, b1, _ := splitAggSnapshot(before)
	_, b2, _ := splitAggSnapshot(engineCheckpoint(t, dir))
	if !bytes.Equal(b1, b2) {
		t.Fatal("rebuilt engine state differs from live ingest's")
	}
}

// countDeviceRanges counts device's ranges keys in the store.
func countDeviceRanges(t *testing.T, s *Server, device string) int {
	t.Helper()
	prefix := append(append([]byte{hublog.PrefixRanges}, device...), 0)
	n := 0
	err := s.st.DB.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestStreamRetiredWhenAskedAtBound: between expiry scans, a device at
// its bound that asks for a new stream has its expired streams retired at
// once, and a busy device keeps its stream.
func TestStreamRetiredWhenAskedAtBound(t *testing.T) {
	opts, clock, _ := streamCapOptions(t, 1, time.Hour)
	s := startHub(t, opts())
	d := newDevice(t, "tcp://"+s.BrokerAddr(), "one")
	other := newDevice(t, "tcp://"+s.BrokerAddr(), "other")
	a, b := wire.NewStreamID(), wire.NewStreamID()
	wantAck(t, "a", sendOn(d, a, 1), wirepb.AckStatus_ACK_STATUS_OK)
	clock.add(59*time.Minute + 30*time.Second)
	wantAck(t, "other device (a scan, a not yet expired)", sendOn(other, other.stream, 1), wirepb.AckStatus_ACK_STATUS_OK)
	wantAck(t, "b before a expired", sendOn(d, b, 1), wirepb.AckStatus_ACK_STATUS_RETRY_LATER)
	clock.add(40 * time.Second) // a idle 60m10s; the last scan was 40s ago
	wantAck(t, "b after a expired", sendOn(d, b, 1), wirepb.AckStatus_ACK_STATUS_OK)
	wantStreams(t, s, d.id, b)
	wantStreams(t, s, other.id, other.stream)
	if got := counterValue(t, s.m.streamsRetired); got != 1 {
		t.Fatalf("streams_retired_total = %v, want 1", got)
	}
}
