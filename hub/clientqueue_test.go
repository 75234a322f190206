package hub

import (
	"bytes"
	"edgeflow/hub/broker"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// rawSubscriber connects to the broker at addr with a hand-written MQTT
// 3.1.1 CONNECT (no keep-alive), subscribes to topic at QoS 0, reads the
// CONNACK and SUBACK and then reads nothing more: a client that has stopped
// reading, as a hung device would.
func rawSubscriber(t *testing.T, addr, clientID, topic string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	str := func(s string) []byte { return append([]byte{byte(len(s) >> 8), byte(len(s))}, s...) }
	packet := func(kind byte, body []byte) []byte { return append([]byte{kind, byte(len(body))}, body...) }
	connect := append(append(str("MQTT"), 4, 0x02, 0, 0), str(clientID)...)
	subscribe := append(append([]byte{0, 1}, str(topic)...), 0)
	if _, err := c.Write(append(packet(0x10, connect), packet(0x82, subscribe)...)); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	reply := make([]byte, 4+5)
	if _, err := io.ReadFull(c, reply); err != nil {
		t.Fatalf("reading CONNACK and SUBACK: %v", err)
	}
	if !bytes.Equal(reply, []byte{0x20, 2, 0, 0, 0x90, 3, 0, 1, 0}) {
		t.Fatalf("CONNACK and SUBACK % x: want the connection accepted and QoS 0 granted", reply)
	}
	return c
}

// The embedded broker keeps at most MQTTClientQueue messages for a client
// that does not read and drops (and counts) the rest, instead of holding
// them all: its queue is allocated, 8 bytes a slot, for every connection.
func TestClientQueueBound(t *testing.T) {
	s := startHub(t, func() Options { o := testOptions(t, t.TempDir()); o.MQTTClientQueue = 2; return o }())
	rawSubscriber(t, s.BrokerAddr(), "stalled", "edge/v1/stalled/ack")
	// Far more than loopback's socket buffers hold (a few MiB each way by
	// default, tens where they are tuned up): once they are full the
	// broker's writer blocks and the queue fills.
	payload := bytes.Repeat([]byte{0xA5}, 256<<10)
	const sent = 1000
	for range sent {
		if err := s.tr.Publish([]broker.Message{{Topic: "edge/v1/stalled/ack", Payload: payload, AtMostOnce: true}}); err != nil {
			t.Fatal(err)
		}
	}
	dropped := brokerCounter(t, s, "dropped_messages_total")
	if dropped < sent/2 {
		t.Fatalf("dropped %v of %d messages to a client that stopped reading; want most, with a queue of 2", dropped, sent)
	}
	if dropped >= sent {
		t.Fatalf("dropped all %d messages: the socket buffers and the queue should have taken some", sent)
	}
}

// An out-of-range client queue is refused at validation, by name (the
// broker's bound is 1<<20).
func TestClientQueueValidate(t *testing.T) {
	for _, n := range []int{-1, 1<<20 + 1} {
		o := testOptions(t, t.TempDir())
		o.MQTTClientQueue = n
		o.EnsureDefaults()
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "MQTTClientQueue") {
			t.Errorf("MQTTClientQueue %d: %v, want an error naming it", n, err)
		}
	}
}
