package hub

import (
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"edgeflow/hub/broker"
	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

func TestWatchesHandedOff(t *testing.T) {
	for filter, want := range map[string]bool{
		"edge/v1/+/batch":            true,
		"edge/v1/dev-1/batch":        true,
		"edge/v1/#":                  true,
		"#":                          true,
		"edge/#":                     true,
		"+/+/+/+":                    true,
		"edge/v1/+/+":                true,
		"edge/v1/+/time/req":         true,
		"edge/v1/+/time/+":           true,
		"edge/v1/+/batch/#":          true,
		"$share/g/edge/v1/+/batch":   true,
		"$share/g/#":                 true,
		"edge/v1/+/ack":              false,
		"edge/v1/+/status":           false,
		"edge/v1/dev-1/time/resp":    false,
		"edge/v1/+/batch/x":          false,
		"edge/v2/+/batch":            false,
		"edge/v1/+":                  false,
		"other/#":                    false,
		"$share/g/edge/v1/+/status":  false,
		"$share/nofilter":            false,
		"edge/v1/+/+/+/+":            false,
		"edge/v1/+/time/req/extra/#": false,
	} {
		if got := broker.WatchesHandedOff(filter); got != want {
			t.Errorf("watchesHandedOff(%q) = %v, want %v", filter, got, want)
		}
	}
}

func TestHandedOff(t *testing.T) {
	for topic, want := range map[string]bool{
		wire.BatchTopic("d"):    true,
		wire.TimeReqTopic("d"):  true,
		wire.StatusTopic("d"):   false,
		wire.AckTopic("d"):      false,
		wire.TimeRespTopic("d"): false,
		"edge/v1/d":             false,
		"x/edge/v1/d/batch":     false,
	} {
		if got := broker.HandedOff(topic); got != want {
			t.Errorf("handedOff(%q) = %v, want %v", topic, got, want)
		}
	}
}

// The embedded broker hands batches to the hub without routing them; a
// client that subscribes to batches still gets every one published while
// it is subscribed, and when it leaves the broker hands them off again.
// Each batch is applied exactly once either way.
func TestHandoffWithWatcher(t *testing.T) {
	s, cc := startCountingHub(t, t.TempDir())
	waitReady(t, s)
	brokerURL := "tcp://" + s.BrokerAddr()
	e := s.tr.(*broker.Embedded)
	dev := newDevice(t, brokerURL, "dev-h")
	next := uint64(1)
	send := func() {
		t.Helper()
		if a := dev.send(makeBatch("dev-h", dev.stream, next, 5)); a.Status != wirepb.AckStatus_ACK_STATUS_OK {
			t.Fatalf("batch %d: %v", next, a.Status)
		}
		next += 5
	}
	send()
	if h, r := e.Direct.Handed.Load(), e.Direct.Routed.Load(); h != 1 || r != 0 {
		t.Fatalf("handed off %d, routed %d batches with no other subscriber, want 1, 0", h, r)
	}

	got := make(chan string, 16)
	wo := paho.NewClientOptions().AddBroker(brokerURL).SetClientID("watcher").SetCleanSession(true)
	w := paho.NewClient(wo)
	if tok := w.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("watcher connect: %v", tok.Error())
	}
	defer w.Disconnect(100)
	for _, f := range []string{"edge/v1/+/batch", "$share/tap/edge/v1/#"} {
		if tok := w.Subscribe(f, 1, func(_ paho.Client, m paho.Message) { got <- m.Topic() }); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("watcher subscribe %s: %v", f, tok.Error())
		}
	}
	if n := e.Direct.Watchers.Load(); n != 2 {
		t.Fatalf("watchers %d after two subscriptions that match batches, want 2", n)
	}
	send()
	// "edge/v1/#" also matches the hub's ack, which can arrive between the
	// two copies of the batch; only batches and acks may arrive.
	for batches := 0; batches < 2; {
		select {
		case topic := <-got:
			switch topic {
			case wire.BatchTopic("dev-h"):
				batches++
			case wire.AckTopic("dev-h"):
			default:
				t.Fatalf("watcher got %s", topic)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a subscriber to batches did not get the batch published while it was subscribed")
		}
	}
	if n := e.Direct.Routed.Load(); n != 1 {
		t.Fatalf("routed %d batches with a watcher, want 1", n)
	}

	if tok := w.Unsubscribe("edge/v1/+/batch"); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	if n := e.Direct.Watchers.Load(); n != 1 {
		t.Fatalf("watchers %d after one unsubscribe, want 1", n)
	}
	w.Disconnect(100) // a clean session ends: its subscriptions go
	waitFor(t, func() bool { return e.Direct.Watchers.Load() == 0 })
	send()
	if h, r := e.Direct.Handed.Load(), e.Direct.Routed.Load(); h != 2 || r != 1 {
		t.Fatalf("handed off %d, routed %d batches, want 2, 1 once the watcher left", h, r)
	}
	key := "dev-h/" + dev.stream.String()
	stream := func() countState {
		cc.mu.Lock()
		defer cc.mu.Unlock()
		if st := cc.Streams[key]; st != nil {
			return *st
		}
		return countState{}
	}
	waitFor(t, func() bool { return stream().Events == 15 })
	if st := stream(); st.Twice != 0 || st.Batches != 3 {
		t.Fatalf("applied %d batches (want 3), %d events twice (want 0)", st.Batches, st.Twice)
	}
}
