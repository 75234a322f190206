package natsbus

import (
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"edgeflow/hub/broker"
	"edgeflow/internal/testnats"
)

const within = 30 * time.Second

func TestTopicSubjectMapping(t *testing.T) {
	for _, c := range []struct{ topic, subject string }{
		{"edge/v1/dev-1/ack", "edge.v1.dev-1.ack"},
		{"edge/v1/site.3/time/resp", "edge.v1.site//3.time.resp"},
		{"edge/v1/a.b.c/status", "edge.v1.a//b//c.status"},
	} {
		s, err := TopicToSubject(c.topic)
		if err != nil || s != c.subject {
			t.Errorf("TopicToSubject(%q) = %q, %v; want %q", c.topic, s, err, c.subject)
		}
		tp, err := SubjectToTopic(c.subject)
		if err != nil || tp != c.topic {
			t.Errorf("SubjectToTopic(%q) = %q, %v; want %q", c.subject, tp, err, c.topic)
		}
	}
	for _, bad := range []string{"", "edge//x", "edge/+/x", "edge/#", "edge/a b", "edge/*/x", "edge/>", strings.Repeat("a", 1025)} {
		if s, err := TopicToSubject(bad); err == nil {
			t.Errorf("TopicToSubject(%q) = %q, want an error", bad, s)
		}
	}
	for _, bad := range []string{"", "edge..x", "edge.a/b.x", "edge.a///b.x"} {
		if tp, err := SubjectToTopic(bad); err == nil {
			t.Errorf("SubjectToTopic(%q) = %q, want an error", bad, tp)
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	ok := Options{URLs: []string{"nats://a:4222", "tls://b:4222"}}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{}, "URLs"},
		{Options{URLs: []string{"http://a:1"}}, "scheme"},
		{Options{URLs: []string{"nats://u:secret@"}}, "scheme://host:port"},
		{Options{URLs: []string{"nats://a:1"}, CredsFile: "c", Token: "t"}, "at most one"},
		{Options{URLs: []string{"nats://a:1"}, User: "u"}, "User and Password"},
		{Options{URLs: []string{"nats://a:1"}, TLS: ok.TLS}, ""},
	} {
		err := c.o.Validate()
		if c.want == "" {
			if err != nil {
				t.Errorf("%+v: %v", c.o, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "secret") {
			t.Errorf("%+v: %v, want an error saying %q without the password", c.o, err, c.want)
		}
	}
}

// TestBusThroughMQTT: a device's status and time request published over
// NATS' MQTT listener reach the bus's handler under their MQTT topics (a
// device id with a dot included); what the bus publishes reaches the
// device's MQTT subscription. While the server is down the bus says it is
// not connected and Publish fails at once; after the server's restart it
// reconnects and delivers again.
func TestBusThroughMQTT(t *testing.T) {
	c := testnats.Start(t, 1)
	b, err := Dial(Options{URLs: []string{c.Nodes[0].URL()}, Name: "test-hub", Timeout: 5 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	got := make(chan string, 16)
	if err := b.Start(func(topic string, payload []byte) { got <- topic + " " + string(payload) }); err != nil {
		t.Fatal(err)
	}
	if err := b.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var acks []string
	subscribed := make(chan error, 4)
	// Subscribe on every connection, as the agent does: the session is
	// clean, and the server restarts.
	o := mqtt.NewClientOptions().AddBroker(c.Nodes[0].MQTTURL()).SetClientID("edgeflow-site-3").SetProtocolVersion(4).
		SetAutoReconnect(true).SetConnectTimeout(10 * time.Second).SetMaxReconnectInterval(time.Second).
		SetOnConnectHandler(func(cl mqtt.Client) {
			tok := cl.Subscribe("edge/v1/site.3/ack", 1, func(_ mqtt.Client, m mqtt.Message) {
				mu.Lock()
				acks = append(acks, string(m.Payload()))
				mu.Unlock()
			})
			tok.WaitTimeout(within)
			subscribed <- tok.Error()
		})
	cl := mqtt.NewClient(o)
	if tok := cl.Connect(); !tok.WaitTimeout(within) || tok.Error() != nil {
		t.Fatalf("mqtt connect: %v", tok.Error())
	}
	defer cl.Disconnect(100)
	if err := <-subscribed; err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	for _, m := range []struct{ topic, payload string }{{"edge/v1/site.3/status", "online"}, {"edge/v1/site.3/time/req", "ping"}} {
		if tok := cl.Publish(m.topic, 1, false, m.payload); !tok.WaitTimeout(within) || tok.Error() != nil {
			t.Fatalf("publish %s: %v", m.topic, tok.Error())
		}
	}
	want := map[string]bool{"edge/v1/site.3/status online": true, "edge/v1/site.3/time/req ping": true}
	for len(want) > 0 {
		select {
		case m := <-got:
			if !want[m] {
				t.Fatalf("handler got %q", m)
			}
			delete(want, m)
		case <-time.After(within):
			t.Fatalf("handler still lacks %v", want)
		}
	}
	waitAck := func(payload string) {
		t.Helper()
		deadline := time.Now().Add(within)
		for {
			if err := b.Publish([]broker.Message{{Topic: "edge/v1/site.3/ack", Payload: []byte(payload)}}); err != nil {
				t.Logf("publish: %v", err)
			}
			mu.Lock()
			n := 0
			for _, a := range acks {
				if a == payload {
					n++
				}
			}
			mu.Unlock()
			if n > 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the MQTT subscriber never got %q", payload)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitAck("ack-1")
	c.Kill(0)
	deadline := time.Now().Add(within)
	for b.Connected() {
		if time.Now().After(deadline) {
			t.Fatal("still connected with the server killed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := b.Publish([]broker.Message{{Topic: "edge/v1/site.3/ack", Payload: []byte("lost")}}); err == nil {
		t.Fatal("Publish while disconnected succeeded")
	}
	c.Restart(0)
	for !b.Connected() {
		if time.Now().After(deadline.Add(within)) {
			t.Fatal("not reconnected after the server's restart")
		}
		time.Sleep(10 * time.Millisecond)
	}
	waitAck("ack-2")
}
