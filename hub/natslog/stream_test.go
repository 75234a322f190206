package natslog_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"edgeflow/hub/natslog"
	"edgeflow/wire"
)

// TestMQTTBatchesLandInTheirPartition publishes one batch per device over
// the server's MQTT listener, as agents do, and checks each lands in the
// partition PartitionOf computes, under the right device, with nothing
// anywhere else: PartitionOf is the server's hash, including for a device
// id with dots (which NATS writes as "//").
func TestMQTTBatchesLandInTheirPartition(t *testing.T) {
	c, js, l := startLog(t, 1, natslog.Options{Replicas: 1})
	n := l.Options().Partitions
	devices := []string{"site.7.pump", "a.b", "x"}
	for i := range 60 {
		devices = append(devices, fmt.Sprintf("dev-%03d", i))
	}
	want := map[int]map[string]bool{}
	for i, d := range devices {
		// NATS refuses MQTT client ids with a '.', so the client id here
		// is not derived from the device id.
		cl := mqttClient(t, c.Nodes[0].MQTTURL(), fmt.Sprintf("test-client-%d", i))
		mqttPublish(t, cl, wire.BatchTopic(d), []byte(d))
		p := natslog.PartitionOf(d, n)
		if want[p] == nil {
			want[p] = map[string]bool{}
		}
		want[p][d] = true
	}
	if len(want) < 10 {
		t.Fatalf("%d devices hashed into only %d of %d partitions", len(devices), len(want), n)
	}
	// Where the server put each batch, read by sequence: a wrong hash
	// fails here naming the device rather than as a reader's timeout.
	stream := waitMessages(t, js, uint64(len(devices)))
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	for seq := uint64(1); seq <= uint64(len(devices)); seq++ {
		raw, err := stream.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("get seq %d: %v", seq, err)
		}
		dev := string(raw.Data)
		wantSubj := fmt.Sprintf("%s.%d.%s", natslog.LogPrefix, natslog.PartitionOf(dev, n), natslog.DeviceToken(dev))
		if raw.Subject != wantSubj {
			t.Errorf("device %q stored as %s, want %s", dev, raw.Subject, wantSubj)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	for p, devs := range want {
		for _, m := range readN(t, l, p, 0, len(devs)) {
			if m.Partition != p || !devs[m.Device] || string(m.Data) != m.Device {
				t.Errorf("partition %d: got message of device %q in partition %d with data %q; want one of %d devices PartitionOf puts here", p, m.Device, m.Partition, m.Data, len(devs))
			}
			delete(devs, m.Device)
		}
	}
	f, err := l.Fullness(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if f.Messages != uint64(len(devices)) {
		t.Fatalf("stream holds %d messages, published %d", f.Messages, len(devices))
	}
	if f.Bytes == 0 || f.MaxBytes != natslog.DefaultMaxBytes || f.Ratio() <= 0 || f.Ratio() >= 1 {
		t.Fatalf("fullness %+v (ratio %v): want some bytes of the default limit", f, f.Ratio())
	}
}

// TestEnsureStreamIdempotentAndRefusesRepartition runs EnsureStream again
// with the same, tuned and repartitioned options against an existing
// stream.
func TestEnsureStreamIdempotentAndRefusesRepartition(t *testing.T) {
	_, js, l := startLog(t, 1, natslog.Options{Replicas: 1, Partitions: 16})
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	if _, err := l.Publish(ctx, "dev-1", []byte("kept")); err != nil {
		t.Fatal(err)
	}
	opts := natslog.Options{Replicas: 1, Partitions: 16}
	if _, err := natslog.EnsureStream(ctx, js, opts); err != nil {
		t.Fatalf("second EnsureStream with the same options: %v", err)
	}

	opts.MaxAge = 2 * time.Hour
	opts.MaxBytes = 64 << 20
	l2, err := natslog.EnsureStream(ctx, js, opts)
	if err != nil {
		t.Fatalf("EnsureStream with new retention: %v", err)
	}
	info, err := js.Stream(ctx, natslog.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	if cfg := info.CachedInfo().Config; cfg.MaxAge != 2*time.Hour || cfg.MaxBytes != 64<<20 || cfg.Discard != jetstream.DiscardNew {
		t.Fatalf("stream after retuning: max age %v, max bytes %d, discard %v", cfg.MaxAge, cfg.MaxBytes, cfg.Discard)
	}
	if f, err := l2.Fullness(ctx); err != nil || f.Messages != 1 {
		t.Fatalf("after retuning the stream holds %d messages (%v), want the 1 published", f.Messages, err)
	}

	opts.Partitions = 32
	_, err = natslog.EnsureStream(ctx, js, opts)
	if !errors.Is(err, natslog.ErrPartitionsChanged) || !strings.Contains(err.Error(), "has 16 partitions, configured 32") {
		t.Fatalf("EnsureStream with 32 partitions against a 16-partition stream: %v; want ErrPartitionsChanged naming both", err)
	}
}

// TestEnsureStreamRefusesForeignStream refuses a stream of the log's name
// that captures other subjects, and one without the transform.
func TestEnsureStreamRefusesForeignStream(t *testing.T) {
	_, js, _ := startLog(t, 1, natslog.Options{Replicas: 1})
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "OTHER", Subjects: []string{"other.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "PLAIN", Subjects: []string{"edge.v2.*.batch"}}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"OTHER", "PLAIN"} {
		_, err := natslog.EnsureStream(ctx, js, natslog.Options{Stream: name, Replicas: 1})
		if !errors.Is(err, natslog.ErrStreamMismatch) {
			t.Errorf("EnsureStream over stream %s: %v, want ErrStreamMismatch", name, err)
		}
	}
	if _, err := natslog.EnsureStream(ctx, js, natslog.Options{Partitions: 2000}); !errors.Is(err, natslog.ErrInvalidOption) || !strings.Contains(err.Error(), "Partitions") {
		t.Errorf("2000 partitions: %v, want ErrInvalidOption naming Partitions", err)
	}
}

// TestReaderResumesAfterSequence reads part of a partition, then opens a
// new reader after the last sequence read and gets exactly the rest in
// order.
func TestReaderResumesAfterSequence(t *testing.T) {
	_, _, l := startLog(t, 1, natslog.Options{Replicas: 1, Partitions: 4})
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	const device, total = "dev.resume", 20
	p := natslog.PartitionOf(device, 4)
	// Another partition's device interleaved, so sequences have gaps.
	other := "dev-other"
	for natslog.PartitionOf(other, 4) == p {
		other += "x"
	}
	for i := range total {
		if _, err := l.Publish(ctx, device, fmt.Appendf(nil, "%d", i)); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Publish(ctx, other, []byte("other")); err != nil {
			t.Fatal(err)
		}
	}
	first := readN(t, l, p, 0, 8)
	rest := readN(t, l, p, first[len(first)-1].Seq+1, total-8)
	all := append(first, rest...)
	for i, m := range all {
		if string(m.Data) != fmt.Sprint(i) || m.Device != device {
			t.Fatalf("message %d: device %q data %q, want %q %q", i, m.Device, m.Data, device, fmt.Sprint(i))
		}
		if i > 0 && m.Seq <= all[i-1].Seq {
			t.Fatalf("message %d: sequence %d after %d", i, m.Seq, all[i-1].Seq)
		}
	}
}

// TestReaderSkipsBadDeviceSubject sends a batch whose topic names an
// invalid device id over MQTT between two valid ones: the Reader reports
// it as ErrBadSubject with its sequence and goes on to the next message.
func TestReaderSkipsBadDeviceSubject(t *testing.T) {
	c, js, l := startLog(t, 1, natslog.Options{Replicas: 1, Partitions: 1})
	cl := mqttClient(t, c.Nodes[0].MQTTURL(), "bad-subject-test")
	mqttPublish(t, cl, wire.BatchTopic("dev-1"), []byte("first"))
	mqttPublish(t, cl, "edge/v1/bad!id/batch", []byte("bad"))
	mqttPublish(t, cl, wire.BatchTopic("dev-2"), []byte("second"))
	waitMessages(t, js, 3)
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	r := openReader(ctx, t, l, 0, 0)
	defer r.Close()
	var got []string
	for range 3 {
		m, err := r.Next(ctx)
		switch {
		case errors.Is(err, natslog.ErrBadSubject) && m.Seq == 2:
			got = append(got, "bad@2")
		case err != nil:
			t.Fatalf("after %v: %v", got, err)
		default:
			got = append(got, fmt.Sprintf("%s:%s@%d", m.Device, m.Data, m.Seq))
		}
	}
	if want := []string{"dev-1:first@1", "bad@2", "dev-2:second@3"}; !slices.Equal(got, want) {
		t.Fatalf("read %v, want %v", got, want)
	}
}
