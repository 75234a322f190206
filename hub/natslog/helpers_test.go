package natslog_test

import (
	"context"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"edgeflow/hub/natslog"
	"edgeflow/internal/testnats"
)

// within bounds every wait of these tests; a failure says what it waited for.
const within = 60 * time.Second

// connect returns a JetStream context over a connection to urls (comma
// separated) that reconnects without limit while the test runs.
func connect(t testing.TB, urls string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(urls, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatalf("connect %s: %v", urls, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// startLog runs size nats-server nodes and ensures the log's stream on them.
func startLog(t testing.TB, size int, opts natslog.Options) (*testnats.Cluster, jetstream.JetStream, *natslog.Log) {
	t.Helper()
	c := testnats.Start(t, size)
	_, js := connect(t, c.URLs())
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	l, err := natslog.EnsureStream(ctx, js, opts)
	if err != nil {
		t.Fatalf("EnsureStream: %v", err)
	}
	return c, js, l
}

// mqttClient connects to a NATS server's MQTT listener the way an agent
// does: MQTT 3.1.1 (NATS refuses 3.1), a persistent session.
func mqttClient(t testing.TB, url, clientID string) mqtt.Client {
	t.Helper()
	o := mqtt.NewClientOptions().AddBroker(url).SetClientID(clientID).
		SetProtocolVersion(4).SetCleanSession(false).SetAutoReconnect(false).
		SetConnectTimeout(10 * time.Second).
		SetConnectionLostHandler(func(_ mqtt.Client, err error) { t.Logf("mqtt %s lost its connection: %v", clientID, err) })
	cl := mqtt.NewClient(o)
	if tok := cl.Connect(); !tok.WaitTimeout(within) || tok.Error() != nil {
		t.Fatalf("mqtt connect %s as %s: %v", url, clientID, tok.Error())
	}
	t.Cleanup(func() { cl.Disconnect(100) })
	return cl
}

// mqttPublish publishes at QoS 1 and waits for the PUBACK.
func mqttPublish(t testing.TB, cl mqtt.Client, topic string, payload []byte) {
	t.Helper()
	tok := cl.Publish(topic, 1, false, payload)
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("mqtt publish %s: no PUBACK within %v (%v)", topic, within, tok.Error())
	}
}

// readN reads n messages of partition p from sequence from, failing the
// test if they do not arrive within the bound. Opening the reader is
// retried, as a hub would: right after a server dies JetStream may still
// place the reader's consumer on it until it notices the server is gone.
func readN(t testing.TB, l *natslog.Log, p int, from uint64, n int) []natslog.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	r := openReader(ctx, t, l, p, from)
	defer r.Close()
	out := make([]natslog.Message, 0, n)
	for len(out) < n {
		m, err := r.Next(ctx)
		if err != nil {
			t.Fatalf("partition %d from %d: read %d of %d messages, then: %v", p, from, len(out), n, err)
		}
		out = append(out, m)
	}
	return out
}

// openReader opens a reader, retrying each attempt after a few seconds
// until ctx ends.
func openReader(ctx context.Context, t testing.TB, l *natslog.Log, p int, from uint64) *natslog.Reader {
	t.Helper()
	for {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		r, err := l.Reader(actx, p, from)
		cancel()
		if err == nil {
			return r
		}
		if ctx.Err() != nil {
			t.Fatalf("open reader of partition %d from %d: %v", p, from, err)
		}
		t.Logf("open reader of partition %d from %d: %v; retrying", p, from, err)
	}
}

// waitMessages waits until the log's stream holds n messages (an MQTT
// PUBACK from NATS precedes the stream's store) and returns the stream.
func waitMessages(t testing.TB, js jetstream.JetStream, n uint64) jetstream.Stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	var last uint64
	for {
		s, err := js.Stream(ctx, natslog.DefaultStream)
		if err == nil {
			if last = s.CachedInfo().State.Msgs; last >= n {
				return s
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("stream holds %d messages after %v, want %d (last error %v)", last, within, n, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
