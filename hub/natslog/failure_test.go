package natslog_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"edgeflow/hub/natslog"
	"edgeflow/wire"
)

// TestStreamFullRefusesBatches fills a 1 MiB stream with 100 KiB batches
// sent over MQTT: what does not fit is not stored (the stream discards
// new messages, never old ones), a JetStream publish is refused naming
// the limit, and once the limit is raised the batches sent again (as an
// agent resends what the hub never acknowledged) are stored after the
// first ones.
func TestStreamFullRefusesBatches(t *testing.T) {
	c, js, l := startLog(t, 1, natslog.Options{Replicas: 1, Partitions: 4, MaxBytes: 1 << 20})
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	const n, size = 15, 100 << 10
	batch := func(i int) []byte {
		return append([]byte(fmt.Sprintf("batch-%02d:", i)), bytes.Repeat([]byte{'x'}, size)...)
	}
	dev := mqttClient(t, c.Nodes[0].MQTTURL(), "edgeflow-dev-full")
	pubacked := 0
	for i := range n {
		tok := dev.Publish(wire.BatchTopic("dev-full"), 1, false, batch(i))
		if tok.WaitTimeout(10*time.Second) && tok.Error() == nil {
			pubacked++
		}
	}
	t.Logf("%d of %d batches of %d KiB PUBACKed by NATS into a 1 MiB stream", pubacked, n, size>>10)

	_, err := l.Publish(ctx, "dev-other", batch(99))
	if err == nil || !strings.Contains(strings.ToLower(err.Error()), "maximum bytes") {
		t.Fatalf("JetStream publish into the full stream: %v, want a refusal naming maximum bytes", err)
	}
	t.Logf("JetStream publish of another batch: %v", err)
	f, err := l.Fullness(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if f.Bytes > f.MaxBytes || f.Messages == 0 || f.Messages >= n {
		t.Fatalf("full stream: %+v; want some but not all %d batches, within MaxBytes", f, n)
	}
	t.Logf("stream full at %d of %d bytes (ratio %.3f), %d batches stored", f.Bytes, f.MaxBytes, f.Ratio(), f.Messages)
	p := natslog.PartitionOf("dev-full", 4)
	kept := readN(t, l, p, 0, int(f.Messages))
	for i, m := range kept {
		if !bytes.Equal(m.Data, batch(i)) {
			t.Fatalf("stored batch %d is %.9q, want the first batches in order", i, m.Data)
		}
	}

	// The operator raises MaxBytes; the agent resends what was not acked.
	if _, err := natslog.EnsureStream(ctx, js, natslog.Options{Replicas: 1, Partitions: 4, MaxBytes: 4 << 20}); err != nil {
		t.Fatal(err)
	}
	for i := len(kept); i < n; i++ {
		mqttPublish(t, dev, wire.BatchTopic("dev-full"), batch(i))
	}
	all := readN(t, l, p, 0, n)
	for i, m := range all {
		if !bytes.Equal(m.Data, batch(i)) {
			t.Fatalf("after the resend, batch %d is %.9q, want every batch once in order", i, m.Data)
		}
	}
}

// TestQuorumLost runs the log as R3 on three servers and SIGKILLs two of
// them. A batch a device sends to the survivor gets no PUBACK and a
// JetStream publish fails, yet once one server is back (two of three) the
// failed publish may be in the stream after all: with a message id it is
// there at most once. The device's resend is stored, and the batch sent
// before the outage is there exactly once.
func TestQuorumLost(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three nats-server processes")
	}
	c, js, l := startLog(t, 3, natslog.Options{Partitions: 4})
	ctx, cancel := context.WithTimeout(context.Background(), 3*within)
	defer cancel()
	dev := &mqttDevice{t: t, url: c.Nodes[0].MQTTURL(), clientID: "edgeflow-dev-q"}
	dev.publish(wire.BatchTopic("dev-q"), []byte("before"))
	waitMessages(t, js, 1)

	c.Kill(1)
	c.Kill(2)
	tok := dev.cl.Publish(wire.BatchTopic("dev-q"), 1, false, []byte("during"))
	acked := tok.WaitTimeout(10*time.Second) && tok.Error() == nil
	t.Logf("batch sent with two of three servers down: PUBACKed %v (%v)", acked, tok.Error())
	pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
	_, err := l.Publish(pctx, "dev-other", []byte("during-js"), jetstream.WithMsgID("during-js"))
	pcancel()
	if err == nil {
		t.Fatal("JetStream publish succeeded with two of three servers down")
	}
	t.Logf("JetStream publish with two of three servers down: %v", err)

	c.Restart(1)
	// The device resends what it has no ack for (the hub acks only what
	// it reads from the stream), through the election until stored.
	dev.sendUntilStored(js, map[string]string{"during": "dev-q"})
	got := storedPayloads(t, js)
	t.Logf("after quorum returned and the resend: %v", got)
	if got["before"].n != 1 || got["during"].n < 1 || got["during-js"].n > 1 {
		t.Fatalf("stream holds %v; want before once, during at least once, during-js at most once", got)
	}
	for payload := range got {
		if payload != "before" && payload != "during" && payload != "during-js" {
			t.Fatalf("stream holds %q, which nobody sent", payload)
		}
	}
}
