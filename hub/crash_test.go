package hub

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"edgeflow/hub/ranges"
	"edgeflow/internal/testbroker"
	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// Environment of a hub child process (see TestMain).
const (
	envChildDir  = "EDGEFLOW_HUB_CHILD_DIR"
	envChildMQTT = "EDGEFLOW_HUB_CHILD_MQTT"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(envChildDir); dir != "" {
		os.Exit(runChildHub(dir, os.Getenv(envChildMQTT)))
	}
	os.Exit(m.Run())
}

// runChildHub runs a hub until SIGTERM or until it is killed.
func runChildHub(dir, mqttAddr string) int {
	o := Options{DataDir: dir, HTTPAddr: HTTPOff, MQTTListen: mqttAddr, CheckpointInterval: 150 * time.Millisecond,
		Consumers: []Consumer{newCountingConsumer()}}
	s, err := New(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := s.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// childHub is a hub in another process, so it can be killed with SIGKILL.
type childHub struct {
	t    *testing.T
	dir  string
	addr string
	cmd  *exec.Cmd
}

func (c *childHub) start() {
	c.t.Helper()
	c.cmd = exec.Command(os.Args[0], "-test.run=^$")
	c.cmd.Env = append(os.Environ(), envChildDir+"="+c.dir, envChildMQTT+"="+c.addr)
	c.cmd.Stderr = os.Stderr
	if err := c.cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
}

func (c *childHub) kill() {
	_ = c.cmd.Process.Kill() // SIGKILL: no shutdown, no checkpoint
	_ = c.cmd.Wait()
}

// crashAgent sends batches of one stream in order, one at a time, and
// resends a batch until the hub acks it (at least once on the wire).
type crashAgent struct {
	id     string
	stream wire.StreamID
	c      paho.Client
	acks   chan *wirepb.Ack
	acked  atomic.Uint64 // last acknowledged sequence number
}

func newCrashAgent(t *testing.T, broker, id string) *crashAgent {
	a := &crashAgent{id: id, stream: wire.NewStreamID(), acks: make(chan *wirepb.Ack, 64)}
	o := paho.NewClientOptions().AddBroker(broker).SetClientID("crash-" + id).SetCleanSession(true).
		SetAutoReconnect(true).SetConnectRetry(true).SetConnectRetryInterval(50 * time.Millisecond).
		SetMaxReconnectInterval(100 * time.Millisecond).SetOrderMatters(false).
		SetOnConnectHandler(func(c paho.Client) {
			c.Subscribe(wire.AckTopic(id), 1, func(_ paho.Client, m paho.Message) {
				if ack, err := wire.DecodeAck(m.Payload(), wire.Limits{}); err == nil {
					a.acks <- ack
				}
			}).WaitTimeout(2 * time.Second)
		})
	a.c = paho.NewClient(o)
	a.c.Connect()
	t.Cleanup(func() { a.c.Disconnect(50) })
	return a
}

// run sends events 1..total in batches of size.
func (a *crashAgent) run(total, size uint64) error {
	for first := uint64(1); first <= total; first += size {
		payload, err := wire.EncodeBatch(makeBatch(a.id, a.stream, first, int(size)))
		if err != nil {
			return err
		}
		deadline := time.Now().Add(60 * time.Second)
		for !a.deliver(first, payload) {
			if time.Now().After(deadline) {
				return fmt.Errorf("agent %s: batch %d never acked", a.id, first)
			}
		}
		a.acked.Store(first + size - 1)
	}
	return nil
}

// deliver publishes once and waits a while for an OK or DUPLICATE ack.
func (a *crashAgent) deliver(first uint64, payload []byte) bool {
	a.c.Publish(wire.BatchTopic(a.id), 1, false, payload).WaitTimeout(time.Second)
	timeout := time.After(time.Second)
	for {
		select {
		case ack := <-a.acks:
			if ack.FirstSeq == first {
				return ack.Status == wirepb.AckStatus_ACK_STATUS_OK || ack.Status == wirepb.AckStatus_ACK_STATUS_DUPLICATE
			}
		case <-timeout:
			return false
		}
	}
}

// TestCrashExactlyOnce kills a hub process with SIGKILL twice while agents
// stream to it, restarts it, and checks that every event of every stream
// was applied exactly once: applied ranges are [1, total] and the
// consumer (checkpointed, then replayed) counted each sequence once.
func TestCrashExactlyOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns hub processes")
	}
	const agents, total, size = 6, 4000, 100
	child := &childHub{t: t, dir: t.TempDir(), addr: fmt.Sprintf("127.0.0.1:%d", testbroker.FreePort(t))}
	child.start()
	var list []*crashAgent
	for i := 0; i < agents; i++ {
		list = append(list, newCrashAgent(t, "tcp://"+child.addr, fmt.Sprintf("crash-%d", i)))
	}
	var wg sync.WaitGroup
	errs := make(chan error, agents)
	for _, a := range list {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- a.run(total, size) }()
	}
	for _, frac := range []uint64{4, 2} { // kill at about 1/4 and 1/2 of the stream
		waitFor(t, func() bool { return list[0].acked.Load() >= total/frac })
		child.kill()
		time.Sleep(100 * time.Millisecond)
		child.start()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	child.kill() // a last crash: recovery must replay from the last checkpoint
	verifyExactlyOnce(t, child.dir, list, total)
}

// verifyExactlyOnce recovers the child's data directory in this process.
func verifyExactlyOnce(t *testing.T, dir string, agents []*crashAgent, total uint64) {
	s, cc := startCountingHub(t, dir)
	for _, a := range agents {
		info, ok := s.Device(a.id)
		if !ok || len(info.Streams) != 1 || !slices.Equal(info.Streams[0].Applied.Ranges(), []ranges.SeqRange{{First: 1, Last: total}}) {
			t.Fatalf("%s: registry %+v", a.id, info.Streams)
		}
		c := cc.Streams[a.id+"/"+a.stream.String()]
		if c == nil || c.Events != total || c.Twice != 0 || !slices.Equal(c.Seen.Ranges(), []ranges.SeqRange{{First: 1, Last: total}}) {
			t.Fatalf("%s: consumer %+v, want %d events once each", a.id, c, total)
		}
	}
}
