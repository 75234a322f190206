package uplink

import (
	"context"
	"strings"
	"testing"
	"time"

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
