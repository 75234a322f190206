package hub

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"edgeflow/hub/clockest"
	"edgeflow/hub/internal/hubtest"
	"edgeflow/hub/ranges"
	"edgeflow/hub/timeservice"
	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// The shared helpers, under the names the hub's tests use.
var (
	baseTimeNs  = hubtest.BaseTimeNs
	makeBatch   = hubtest.MakeBatch
	encodeBatch = hubtest.EncodeBatch
	quietLogger = hubtest.QuietLogger
	splitBatch  = hubtest.SplitBatch
)

type lockedBuffer = hubtest.LockedBuffer

// testOptions are options for a hub on loopback with free ports.
func testOptions(t testing.TB, dir string) Options {
	return Options{DataDir: dir, HTTPAddr: "127.0.0.1:0", MQTTListen: "127.0.0.1:0", Logger: quietLogger(t),
		CheckpointInterval: time.Hour, RetentionInterval: time.Hour}
}

// startHub starts a hub and shuts it down at cleanup.
func startHub(t testing.TB, o Options) *Server {
	t.Helper()
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	return s
}

// startCountingHub starts a hub on dir whose only consumer counts what it
// is given.
func startCountingHub(t testing.TB, dir string) (*Server, *countingConsumer) {
	t.Helper()
	cc := newCountingConsumer()
	o := testOptions(t, dir)
	o.Consumers = []Consumer{cc}
	return startHub(t, o), cc
}

// device is a test agent: a plain paho client that publishes batches and
// collects the hub's acks.
type device struct {
	t      testing.TB
	id     string
	stream wire.StreamID
	c      paho.Client
	mu     sync.Mutex
	acks   map[uint64]*wirepb.Ack // by first_seq
	qos    map[byte]int           // acks received, by the QoS they came at
	got    chan struct{}
}

// newDevice connects a device to broker (tcp://host:port) and subscribes
// to its acks.
func newDevice(t testing.TB, broker, id string) *device {
	t.Helper()
	d := &device{t: t, id: id, stream: wire.NewStreamID(), acks: map[uint64]*wirepb.Ack{}, qos: map[byte]int{}, got: make(chan struct{}, 1)}
	o := paho.NewClientOptions().AddBroker(broker).SetClientID("dev-" + id).SetCleanSession(true).
		SetOrderMatters(false).SetConnectTimeout(5 * time.Second)
	d.c = paho.NewClient(o)
	if tok := d.c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("device %s connect %s: %v", id, broker, tok.Error())
	}
	tok := d.c.Subscribe(wire.AckTopic(id), 1, func(_ paho.Client, m paho.Message) {
		a, err := wire.DecodeAck(m.Payload(), wire.Limits{})
		if err != nil {
			t.Errorf("bad ack: %v", err)
			return
		}
		d.mu.Lock()
		d.acks[a.FirstSeq] = a
		d.qos[m.Qos()]++
		d.mu.Unlock()
		select {
		case d.got <- struct{}{}:
		default:
		}
	})
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe acks: %v", tok.Error())
	}
	t.Cleanup(func() { d.c.Disconnect(100) })
	return d
}

// publish sends a raw payload to the device's batch topic (or topic).
func (d *device) publish(topic string, payload []byte) {
	d.t.Helper()
	if topic == "" {
		topic = wire.BatchTopic(d.id)
	}
	if tok := d.c.Publish(topic, 1, false, payload); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		d.t.Fatalf("publish: %v", tok.Error())
	}
}

// send publishes a batch and waits for its ack.
func (d *device) send(b *wirepb.Batch) *wirepb.Ack {
	d.t.Helper()
	d.forget(b.FirstSeq)
	d.publish("", encodeBatch(d.t, b))
	return d.waitAck(b.FirstSeq, 10*time.Second)
}

// forget drops a remembered ack.
func (d *device) forget(first uint64) {
	d.mu.Lock()
	delete(d.acks, first)
	d.mu.Unlock()
}

// waitAck waits for the ack of the batch starting at first.
func (d *device) waitAck(first uint64, timeout time.Duration) *wirepb.Ack {
	d.t.Helper()
	deadline := time.After(timeout)
	for {
		d.mu.Lock()
		a := d.acks[first]
		d.mu.Unlock()
		if a != nil {
			return a
		}
		select {
		case <-d.got:
		case <-time.After(20 * time.Millisecond):
		case <-deadline:
			d.t.Fatalf("device %s: no ack for first_seq %d within %v", d.id, first, timeout)
		}
	}
}

// countingConsumer counts applied events per stream and notices any event
// applied twice. Its state is JSON, so it checkpoints deterministically.
type countingConsumer struct {
	mu      sync.Mutex
	Streams map[string]*countState `json:"streams"`
}

type countState struct {
	Events  uint64          `json:"events"`
	Seen    ranges.RangeSet `json:"seen"`
	Twice   uint64          `json:"twice"`
	Sum     float64         `json:"sum"`
	Hub     uint64          `json:"hub_estimated"`
	Batches uint64          `json:"batches"`
}

func newCountingConsumer() *countingConsumer {
	return &countingConsumer{Streams: map[string]*countState{}}
}

func (c *countingConsumer) Name() string { return "count" }

func (c *countingConsumer) Apply(b *AppliedBatch) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := b.Device + "/" + b.Stream.String()
	s := c.Streams[k]
	if s == nil {
		s = &countState{}
		c.Streams[k] = s
	}
	s.Batches++
	for _, e := range b.Events {
		s.Events++
		s.Sum += e.Value
		if e.Method == wirepb.TimeMethod_TIME_METHOD_HUB_ESTIMATE {
			s.Hub++
		}
		if s.Seen.Covers(e.Seq, e.Seq) {
			s.Twice++
		}
		s.Seen.Add(e.Seq, e.Seq)
	}
}

func (c *countingConsumer) Snapshot() ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return json.Marshal(c)
}

func (c *countingConsumer) Restore(b []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.Streams = map[string]*countState{}
	return json.Unmarshal(b, c)
}

// The hub's default parts satisfy the interfaces Options takes.
var (
	_ ClockEstimator     = (*clockest.DeviceClocks)(nil)
	_ TimeRequestHandler = (*timeservice.TimeService)(nil)
)
