package uplink

import (
	"testing"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"edgeflow/wire"
)

// ackMessage is an MQTT message on an ack topic.
type ackMessage struct {
	mqtt.Message // nil: only the methods below are called
	topic        string
	retained     bool
	payload      []byte
}

func (m ackMessage) Topic() string     { return m.topic }
func (m ackMessage) Retained() bool    { return m.retained }
func (m ackMessage) Payload() []byte   { return m.payload }
func (m ackMessage) Duplicate() bool   { return false }
func (m ackMessage) Qos() byte         { return 1 }
func (m ackMessage) MessageID() uint16 { return 0 }

// TestRetainedAckDropped: a retained message on the ack topic (a broker
// kept a stale or forged one; the hub never retains acks) never reaches
// the send loop, which would free the batches it names.
func TestRetainedAckDropped(t *testing.T) {
	u := &Uplink{ackTopic: wire.AckTopic("dev-1"), acks: make(chan []byte, 2), stop: make(chan struct{})}
	u.onMessage(nil, ackMessage{topic: wire.AckTopic("dev-1"), retained: true, payload: []byte("forged")})
	u.onMessage(nil, ackMessage{topic: wire.AckTopic("dev-1"), payload: []byte("live")})
	if got := <-u.acks; string(got) != "live" {
		t.Fatalf("the send loop got %q first, want the live ack", got)
	}
	if len(u.acks) != 0 {
		t.Fatalf("%d more acks queued", len(u.acks))
	}
}
