package hub

import (
	"bytes"
	"net"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/mochi-mqtt/server/v2/packets"

	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// TestBrokerHubOnlyTopicsAnonymous: on the open broker (no security
// configured), no client may publish an ack or a time response, nor leave
// a will on those topics; a retained will beyond the size bound is
// delivered but not retained.
func TestBrokerHubOnlyTopicsAnonymous(t *testing.T) {
	s := startHub(t, testOptions(t, t.TempDir()))
	url := "tcp://" + s.BrokerAddr()

	if _, err := mqttClient(t, url, "will-on-ack", "", "", nil, wire.AckTopic("dev-b")); err == nil {
		t.Fatal("a will on another device's ack topic was accepted")
	}
	if n := brokerCounter(t, s, "refused_connections_total", "why", "will_not_allowed"); n != 1 {
		t.Fatalf("will_not_allowed refusals %v, want 1", n)
	}

	c, err := mqttClient(t, url, "forger", "", "", nil, "")
	if err != nil {
		t.Fatal(err)
	}
	resp, _ := wire.EncodeTimeResponse(&wirepb.TimeResponse{RequestId: 1})
	c.Publish(wire.TimeRespTopic("dev-b"), 1, false, resp).WaitTimeout(time.Second) // refused: MQTT 3.1.1 closes the connection
	waitFor(t, func() bool { return brokerCounter(t, s, "acl_denied_total", "action", "publish") == 1 })

	// A client leaves with a retained 5 KiB will on a device's status:
	// the will goes out, but is not kept.
	conn, err := net.Dial("tcp", s.BrokerAddr())
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect}, ProtocolVersion: 4,
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), ClientIdentifier: "big-will", Clean: true, Keepalive: 30,
			WillFlag: true, WillRetain: true, WillTopic: wire.StatusTopic("dev-w"), WillPayload: make([]byte, 5<<10)}}
	if err := pk.ConnectEncode(&buf); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write(buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	connack := make([]byte, 4)
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Read(connack); err != nil || connack[0]>>4 != packets.Connack || connack[3] != 0 {
		t.Fatalf("CONNACK % x: %v", connack, err)
	}
	conn.Close() // no DISCONNECT: the broker sends the will
	waitFor(t, func() bool { return brokerCounter(t, s, "retained_refused_total", "why", "too_large") == 1 })

	// A fresh subscriber gets dev-ok's small status, and nothing for dev-w.
	ok, _ := wire.EncodeStatus(&wirepb.Status{DeviceId: "dev-ok", Online: true})
	c, err = mqttClient(t, url, "dev-ok", "", "", nil, "") // the forger was disconnected
	if err != nil {
		t.Fatal(err)
	}
	c.Publish(wire.StatusTopic("dev-ok"), 1, true, ok).WaitTimeout(5 * time.Second)
	sub, err := mqttClient(t, url, "fresh", "", "", nil, "")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 4)
	for _, f := range []string{wire.StatusTopic("dev-w"), wire.StatusTopic("dev-ok")} {
		sub.Subscribe(f, 1, func(_ paho.Client, msg paho.Message) { got <- msg.Topic() }).WaitTimeout(5 * time.Second)
	}
	select {
	case topic := <-got:
		if topic != wire.StatusTopic("dev-ok") {
			t.Fatalf("a fresh subscriber got a retained %s", topic)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("dev-ok's retained status never came")
	}
}
