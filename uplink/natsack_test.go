package uplink

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"edgeflow/internal/testnats"
	"edgeflow/wire"
	wirepb "edgeflow/wire/wirepb"
)

// TestNATSAckQoS runs an uplink against a real nats-server's MQTT listener
// at each ack QoS, with a hub stand-in that reads batches on core NATS
// and publishes acks on core NATS (edge.v1.{device}.ack), as cluster
// mode's hub does. Every event is acked either way; at QoS 1 NATS keeps a
// JetStream consumer of its MQTT message stream for the ack subscription,
// at QoS 0 it keeps none.
func TestNATSAckQoS(t *testing.T) {
	c := testnats.Start(t, 1)
	nc, err := nats.Connect(c.Nodes[0].URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// The hub stand-in: ack every batch OK on the device's ack subject.
	sub, err := nc.Subscribe("edge.v1.*.batch", func(m *nats.Msg) {
		device := strings.Split(m.Subject, ".")[2]
		b, err := wire.DecodeBatch(m.Data, wire.Limits{})
		if err != nil {
			t.Errorf("%s: not a batch: %v", m.Subject, err)
			return
		}
		last := b.GetFirstSeq() + uint64(len(b.GetEvents())) - 1
		p, err := wire.EncodeAck(&wirepb.Ack{StreamId: b.GetStreamId(), FirstSeq: b.GetFirstSeq(), LastSeq: last,
			Status: wirepb.AckStatus_ACK_STATUS_OK, ServerTimeNs: time.Now().UnixNano()})
		if err != nil {
			t.Errorf("encode ack: %v", err)
			return
		}
		if err := nc.Publish("edge.v1."+device+".ack", p); err != nil {
			t.Errorf("publish ack: %v", err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		device string
		qos    int // Options.AckQoS
		want   int // consumers of $MQTT_msgs for the device's ack topic
	}{{"dev-ackq1", 1, 1}, {"dev-ackq0", AckQoSAtMostOnce, 0}} {
		t.Run(tc.device, func(t *testing.T) {
			const events = 200
			_, st := openStream(t, tc.device)
			appendEvents(t, st, events, 50)
			acked := make(chan uint64, 64)
			u := newUplink(t, st, c.Nodes[0].MQTTURL(), func(o *Options) {
				o.AckQoS = tc.qos
				o.MaxBatchEvents = 20
				// Longer than the test waits: every ack counted is the
				// stand-in's answer to a first send, not to a resend.
				o.AckTimeout = 5 * time.Minute
				o.OnAck = func(upTo uint64, _ int64) {
					select {
					case acked <- upTo:
					default:
					}
				}
			})
			stop := runUplink(t, u)
			defer stop()
			deadline := time.After(60 * time.Second)
			for upTo := uint64(0); upTo < events; {
				select {
				case upTo = <-acked:
				case <-deadline:
					t.Fatalf("acked through %d after 60s, want all %d events acked", upTo, events)
				}
			}
			if got := value(u.m.BatchesResent); got != 0 {
				t.Errorf("%v batches resent, want 0", got)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			s, err := js.Stream(ctx, "$MQTT_msgs")
			if err != nil {
				t.Fatalf("NATS' MQTT message stream: %v", err)
			}
			n, all := 0, 0
			l := s.ListConsumers(ctx)
			for ci := range l.Info() {
				all++
				if strings.Contains(ci.Config.FilterSubject, "edge.v1."+tc.device+".ack") {
					n++
				}
			}
			if err := l.Err(); err != nil {
				t.Fatalf("list consumers: %v", err)
			}
			if n != tc.want {
				t.Errorf("ack qos %d: %d consumers of $MQTT_msgs for %s's acks (of %d), want %d", tc.qos, n, tc.device, all, tc.want)
			}
		})
	}
}

// TestNATSKeepsNoCoreAckForAnOfflineSubscriber pins what makes QoS 0 ack
// subscriptions lose nothing in cluster mode: a message published on core
// NATS (as hubd publishes acks) is not kept for a disconnected QoS 1
// subscriber with a kept session, while one an MQTT client publishes at
// QoS 1 is, and arrives on reconnect before a marker published after it.
func TestNATSKeepsNoCoreAckForAnOfflineSubscriber(t *testing.T) {
	c := testnats.Start(t, 1)
	nc, err := nats.Connect(c.Nodes[0].URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	const topic, subject = "edge/v1/dev-off/ack", "edge.v1.dev-off.ack"
	got := make(chan string, 16)
	connect := func() mqtt.Client {
		o := mqtt.NewClientOptions().AddBroker(c.Nodes[0].MQTTURL()).SetClientID("edgeflow-dev-off").
			SetCleanSession(false).SetOrderMatters(true).SetKeepAlive(5 * time.Second)
		o.SetDefaultPublishHandler(func(_ mqtt.Client, m mqtt.Message) { got <- string(m.Payload()) })
		cli := mqtt.NewClient(o)
		if tok := cli.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("connect: %v", tok.Error())
		}
		return cli
	}
	cli := connect()
	if tok := cli.Subscribe(topic, 1, nil); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	cli.Disconnect(100)
	if err := nc.Publish(subject, []byte("core")); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	pub := dialTest(t, c.Nodes[0].MQTTURL(), "edgeflow-pub-off", nil)
	if tok := pub.Publish(topic, 1, false, "mqtt"); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("mqtt publish: %v", tok.Error())
	}
	cli = connect()
	defer cli.Disconnect(0)
	if tok := pub.Publish(topic, 1, false, "marker"); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("marker: %v", tok.Error())
	}
	var seen []string
	for len(seen) == 0 || seen[len(seen)-1] != "marker" {
		select {
		case p := <-got:
			seen = append(seen, p)
		case <-time.After(30 * time.Second):
			t.Fatalf("after reconnect got %q, no marker", seen)
		}
	}
	if !slices.Contains(seen, "mqtt") || slices.Contains(seen, "core") {
		t.Errorf("after reconnect got %q: want the MQTT publish kept, the core one not", seen)
	}
}
