package hub

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"edgeflow/hub/clockest"
	"edgeflow/hub/ranges"
	"edgeflow/hub/timeservice"
	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// baseTimeNs is a plausible device time for test events.
var baseTimeNs = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC).UnixNano()

// makeBatch builds a valid batch of n events starting at first.
func makeBatch(device string, stream wire.StreamID, first uint64, n int) *wirepb.Batch {
	b := &wirepb.Batch{DeviceId: device, StreamId: stream[:], FirstSeq: first, SendTimeNs: baseTimeNs + int64(first)*1e6,
		Backlog: &wirepb.Backlog{Events: 10, Bytes: 1000},
		Clock:   &wirepb.ClockEstimate{OffsetNs: 1500, UncertaintyNs: 2000, Method: wirepb.TimeMethod_TIME_METHOD_NTP}}
	for i := 0; i < n; i++ {
		seq := first + uint64(i)
		b.Events = append(b.Events, &wirepb.Event{Metric: []string{"temp", "hum", "volt"}[seq%3], Value: float64(seq%97) / 4,
			Tags: []*wirepb.Tag{{Key: "room", Value: fmt.Sprint("r", seq%5)}}, DeviceTimeNs: baseTimeNs + int64(seq)*1e6,
			MonoNs: int64(seq) * 1e6, BootId: "boot-1", OffsetNs: 1500, UncertaintyNs: 2000, Method: wirepb.TimeMethod_TIME_METHOD_NTP})
	}
	return b
}

// encodeBatch frames b.
func encodeBatch(t testing.TB, b *wirepb.Batch) []byte {
	t.Helper()
	p, err := wire.EncodeBatch(b)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// quietLogger discards logs unless -v.
func quietLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

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
