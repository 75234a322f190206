package natslog_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/nats-io/nats.go/jetstream"

	"edgeflow/hub/natslog"
	"edgeflow/wire"
)

// TestClusterKillLosesNoAcknowledgedMessage runs the log as an R3 stream
// on three servers and SIGKILLs the stream's leader midway through a run
// of publishes, some acknowledged by JetStream, some sent over MQTT to a
// surviving server the way agents send them. It checks that the stream
// keeps accepting, that the checkpoint bucket keeps its compare-and-set,
// and, before and after the killed server comes back, that every
// JetStream-acknowledged message is in its partition exactly once and
// every MQTT batch at least once once its sender has resent what it did
// not see in the stream (an agent resends what the hub has not
// acknowledged; NATS' PUBACK alone does not mean the stream has it).
func TestClusterKillLosesNoAcknowledgedMessage(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three nats-server processes")
	}
	c, js, l := startLog(t, 3, natslog.Options{Partitions: 8})
	ctx, cancel := context.WithTimeout(context.Background(), 3*within)
	defer cancel()
	s, err := js.Stream(ctx, natslog.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	leader := s.CachedInfo().Cluster.Leader
	k := c.Index(leader)
	if k < 0 {
		t.Fatalf("stream leader %q is none of the test's nodes", leader)
	}
	survivor := c.Nodes[(k+1)%len(c.Nodes)]
	dev := &mqttDevice{t: t, url: survivor.MQTTURL(), clientID: "cluster-test"}
	cp, err := natslog.OpenCheckpoints(ctx, js, natslog.CheckpointOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rev1, err := cp.Save(ctx, 0, 1, []byte("before"), 0)
	if err != nil {
		t.Fatal(err)
	}

	acked := map[string]string{} // payload -> device, acknowledged by JetStream
	sent := map[string]string{}  // payload -> device, sent over MQTT
	publish := func(from, to int) {
		for i := from; i < to; i++ {
			device, id := fmt.Sprintf("dev-%d", i%10), fmt.Sprintf("m-%04d", i)
			publishUntilAcked(ctx, t, l, device, id)
			acked[id] = device
		}
	}
	publishMQTT := func(from, to int) {
		batch := map[string]string{}
		for i := from; i < to; i++ {
			batch[fmt.Sprintf("q-%04d", i)] = fmt.Sprintf("dev-mq.%d", i)
		}
		dev.sendUntilStored(js, batch)
		maps.Copy(sent, batch)
	}

	publish(0, 150)
	publishMQTT(0, 10)
	c.Kill(k)
	t.Logf("killed %s, the stream's leader", leader)
	publish(150, 300)
	publishMQTT(10, 20)

	rev2 := saveRetrying(ctx, t, cp, 0, 300, []byte("after"), rev1)
	if _, err := cp.Save(ctx, 0, 200, []byte("zombie"), rev1); !errors.Is(err, natslog.ErrCheckpointConflict) {
		t.Fatalf("stale checkpoint save with %s down: %v, want ErrCheckpointConflict", leader, err)
	}

	checkLog(t, js, l, acked, sent)
	c.Restart(k)
	publish(300, 310)
	checkLog(t, js, l, acked, sent)
	got, err := cp.Load(ctx, 0)
	if err != nil || got.Revision != rev2 || string(got.State) != "after" {
		t.Fatalf("checkpoint after restart: %+v, %v; want revision %d state after", got, err, rev2)
	}
}

// publishUntilAcked publishes one message with a message id, retrying on
// errors (no leader during an election, a lost reply) until the stream
// acknowledges it; the id makes a retry of a stored message a duplicate
// the stream drops.
func publishUntilAcked(ctx context.Context, t *testing.T, l *natslog.Log, device, id string) {
	t.Helper()
	for {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := l.Publish(actx, device, []byte(id), jetstream.WithMsgID(id))
		cancel()
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("publish %s for %s: not acknowledged within the test's bound: %v", id, device, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// mqttDevice sends batches over MQTT as an agent does: a fresh client per
// connection, and whatever it has not seen stored is sent again.
type mqttDevice struct {
	t        *testing.T
	url      string
	clientID string
	cl       mqtt.Client
}

// publish sends one batch at QoS 1, reconnecting while the server drops
// the connection or does not answer.
func (d *mqttDevice) publish(topic string, payload []byte) {
	d.t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if d.cl == nil || !d.cl.IsConnectionOpen() {
			o := mqtt.NewClientOptions().AddBroker(d.url).SetClientID(d.clientID).
				SetProtocolVersion(4).SetCleanSession(false).SetAutoReconnect(false).
				SetConnectTimeout(5 * time.Second)
			d.cl = mqtt.NewClient(o)
			if tok := d.cl.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
				d.t.Logf("mqtt connect %s: %v; retrying", d.url, tok.Error())
				time.Sleep(200 * time.Millisecond)
				continue
			}
			d.t.Cleanup(func() { d.cl.Disconnect(100) })
		}
		tok := d.cl.Publish(topic, 1, false, payload)
		if tok.WaitTimeout(5*time.Second) && tok.Error() == nil {
			return
		}
		d.t.Logf("mqtt publish %s: no PUBACK (%v); reconnecting", topic, tok.Error())
		d.cl.Disconnect(0)
	}
	d.t.Fatalf("mqtt publish %s: no PUBACK within %v", topic, within)
}

// sendUntilStored publishes every batch (payload -> device), then resends
// those the stream does not hold after a while, until it holds them all.
func (d *mqttDevice) sendUntilStored(js jetstream.JetStream, batch map[string]string) {
	d.t.Helper()
	pending := maps.Clone(batch)
	deadline := time.Now().Add(within)
	for round := 0; len(pending) > 0; round++ {
		if time.Now().After(deadline) {
			d.t.Fatalf("%d MQTT batches still not in the stream after %v of resending: %v", len(pending), within, slices.Collect(maps.Keys(pending)))
		}
		if round > 0 {
			d.t.Logf("resending %d MQTT batches the stream does not hold (round %d)", len(pending), round)
		}
		for id, device := range pending {
			d.publish(wire.BatchTopic(device), []byte(id))
		}
		// The agent's ack timeout: wait for the batches to show up.
		for wait := time.Now().Add(2 * time.Second); len(pending) > 0 && time.Now().Before(wait); {
			counts := storedPayloads(d.t, js)
			for id := range pending {
				if counts[id].n > 0 {
					delete(pending, id)
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// stored is what the stream holds of one payload.
type stored struct {
	n        int    // copies
	subjects string // the subject of the last copy
}

// storedPayloads reads every message of the log's stream by sequence,
// starting over after an error (a leader change) until the bound.
func storedPayloads(t *testing.T, js jetstream.JetStream) map[string]stored {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	for {
		out, err := readAll(ctx, js)
		if err == nil {
			return out
		}
		if ctx.Err() != nil {
			t.Fatalf("read the stream: %v", err)
		}
		t.Logf("read the stream: %v; starting over", err)
		time.Sleep(100 * time.Millisecond)
	}
}

func readAll(ctx context.Context, js jetstream.JetStream) (map[string]stored, error) {
	s, err := js.Stream(ctx, natslog.DefaultStream)
	if err != nil {
		return nil, fmt.Errorf("stream info: %w", err)
	}
	st := s.CachedInfo().State
	out := map[string]stored{}
	for seq := st.FirstSeq; seq <= st.LastSeq && st.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			return nil, fmt.Errorf("get seq %d of %d..%d: %w", seq, st.FirstSeq, st.LastSeq, err)
		}
		id := string(m.Data)
		out[id] = stored{n: out[id].n + 1, subjects: m.Subject}
	}
	return out, nil
}

// checkLog checks the stream holds each JetStream-acknowledged payload
// exactly once and each MQTT one at least once, each under its device's
// partition, and nothing else; then reads every partition with a Reader
// and checks it returns exactly those messages.
func checkLog(t *testing.T, js jetstream.JetStream, l *natslog.Log, acked, sent map[string]string) {
	t.Helper()
	n := l.Options().Partitions
	waitMessages(t, js, uint64(len(acked)+len(sent)))
	counts := storedPayloads(t, js)
	perPartition := map[int]int{}
	device := func(id string) string {
		if d, ok := acked[id]; ok {
			return d
		}
		return sent[id]
	}
	for id, st := range counts {
		d := device(id)
		switch {
		case d == "":
			t.Errorf("stream holds %q, which nobody sent", id)
			continue
		case acked[id] != "" && st.n != 1:
			t.Errorf("acknowledged message %q is in the stream %d times", id, st.n)
		}
		p := natslog.PartitionOf(d, n)
		if want := fmt.Sprintf("%s.%d.%s", natslog.LogPrefix, p, natslog.DeviceToken(d)); st.subjects != want {
			t.Errorf("message %q stored as %s, want %s", id, st.subjects, want)
		}
		perPartition[p] += st.n
	}
	for _, m := range []map[string]string{acked, sent} {
		for id := range m {
			if counts[id].n == 0 {
				t.Errorf("message %q of %s is missing from the stream", id, m[id])
			}
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	for p, want := range perPartition {
		for _, m := range readN(t, l, p, 0, want) {
			if d := device(string(m.Data)); d != m.Device || natslog.PartitionOf(d, n) != p {
				t.Errorf("partition %d reader: message %q of %q (sent as %q)", p, m.Data, m.Device, d)
			}
		}
	}
}

// saveRetrying saves a checkpoint, retrying while the bucket has no leader
// (its election after a kill can end later than the log's). A save whose
// reply was lost may have been stored, and its retry is then a conflict:
// the record is loaded to tell that from another writer's.
func saveRetrying(ctx context.Context, t *testing.T, cp *natslog.Checkpoints, p int, pos uint64, state []byte, rev uint64) uint64 {
	t.Helper()
	ambiguous := false
	for {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		r, err := cp.Save(actx, p, pos, state, rev)
		cancel()
		switch {
		case err == nil:
			return r
		case errors.Is(err, natslog.ErrCheckpointConflict) && ambiguous:
			if got, lerr := cp.Load(ctx, p); lerr == nil && got.Position == pos && string(got.State) == string(state) {
				return got.Revision
			}
			t.Fatalf("checkpoint save: %v, and the stored record is not ours", err)
		case errors.Is(err, natslog.ErrCheckpointConflict):
			t.Fatalf("checkpoint save: %v", err)
		case ctx.Err() != nil:
			t.Fatalf("checkpoint save not acknowledged within the test's bound: %v", err)
		}
		t.Logf("checkpoint save: %v; retrying", err)
		ambiguous = true
		time.Sleep(100 * time.Millisecond)
	}
}
