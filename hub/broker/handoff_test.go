package broker

import (
	"fmt"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"edgeflow/hub/internal/hubtest"
	"edgeflow/wire"
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
		if got := watchesHandedOff(filter); got != want {
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
		if got := handedOff(topic); got != want {
			t.Errorf("handedOff(%q) = %v, want %v", topic, got, want)
		}
	}
}

// TestHandoffWithWatcher: the embedded broker hands batches to the hub
// without routing them; a client that subscribes to batches still gets
// every one published while it is subscribed, and when it leaves the
// broker hands them off again. The hub's handler gets each batch exactly
// once either way.
func TestHandoffWithWatcher(t *testing.T) {
	tr, err := NewSecureEmbeddedBroker(EmbeddedOptions{Addr: "127.0.0.1:0", Logger: hubtest.QuietLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	e := tr.(*Embedded)
	t.Cleanup(func() { _ = e.Close() })
	var mu sync.Mutex
	handled := map[string]int{} // batch payload -> times the hub's handler got it
	if err := e.StartIdentified(func(topic, _ string, payload []byte) {
		mu.Lock()
		defer mu.Unlock()
		if topic == wire.BatchTopic("dev-h") {
			handled[string(payload)]++
		}
	}); err != nil {
		t.Fatal(err)
	}
	brokerURL := "tcp://" + e.Addr()
	dev := testClient(t, brokerURL, "dev-h")
	next := 0
	send := func() {
		t.Helper()
		next++
		if tok := dev.Publish(wire.BatchTopic("dev-h"), 1, false, fmt.Sprint("batch ", next)); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("batch %d: %v", next, tok.Error())
		}
	}
	send()
	if h, r := e.direct.handed.Load(), e.direct.routed.Load(); h != 1 || r != 0 {
		t.Fatalf("handed off %d, routed %d batches with no other subscriber, want 1, 0", h, r)
	}

	got := make(chan string, 16)
	w := testClient(t, brokerURL, "watcher")
	for _, f := range []string{"edge/v1/+/batch", "$share/tap/edge/v1/#"} {
		if tok := w.Subscribe(f, 1, func(_ paho.Client, m paho.Message) { got <- m.Topic() }); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("watcher subscribe %s: %v", f, tok.Error())
		}
	}
	if n := e.direct.watchers.Load(); n != 2 {
		t.Fatalf("watchers %d after two subscriptions that match batches, want 2", n)
	}
	send()
	for batches := 0; batches < 2; {
		select {
		case topic := <-got:
			if topic != wire.BatchTopic("dev-h") {
				t.Fatalf("watcher got %s", topic)
			}
			batches++
		case <-time.After(10 * time.Second):
			t.Fatal("a subscriber to batches did not get the batch published while it was subscribed")
		}
	}
	if n := e.direct.routed.Load(); n != 1 {
		t.Fatalf("routed %d batches with a watcher, want 1", n)
	}

	if tok := w.Unsubscribe("edge/v1/+/batch"); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	if n := e.direct.watchers.Load(); n != 1 {
		t.Fatalf("watchers %d after one unsubscribe, want 1", n)
	}
	w.Disconnect(100) // a clean session ends: its subscriptions go
	waitUntil(t, func() bool { return e.direct.watchers.Load() == 0 })
	send()
	if h, r := e.direct.handed.Load(), e.direct.routed.Load(); h != 2 || r != 1 {
		t.Fatalf("handed off %d, routed %d batches, want 2, 1 once the watcher left", h, r)
	}
	waitUntil(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(handled) == 3 })
	mu.Lock()
	defer mu.Unlock()
	for payload, n := range handled {
		if n != 1 {
			t.Fatalf("the hub's handler got %q %d times, want once", payload, n)
		}
	}
}

// testClient connects a paho client with a clean session, disconnected
// at cleanup.
func testClient(t *testing.T, brokerURL, id string) paho.Client {
	t.Helper()
	c := paho.NewClient(paho.NewClientOptions().AddBroker(brokerURL).SetClientID(id).SetCleanSession(true))
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("%s connect: %v", id, tok.Error())
	}
	t.Cleanup(func() { c.Disconnect(100) })
	return c
}

// waitUntil polls cond for up to 10 s.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 10s")
		}
	}
}
