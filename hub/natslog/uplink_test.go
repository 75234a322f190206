package natslog_test

import (
	"context"
	"errors"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/eclipse/paho.mqtt.golang/packets"
	"google.golang.org/protobuf/proto"

	"edgeflow/buffer"
	"edgeflow/hub/natslog"
	"edgeflow/uplink"
	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// TestAgentUplinkIntoLog runs the agent's own uplink, over a real buffer,
// against a NATS server's MQTT listener: every event it sends is in the
// stream, in its device's partition, under the device it names. The device
// with a dot in its id sets a client id without one, which NATS requires.
func TestAgentUplinkIntoLog(t *testing.T) {
	c, _, l := startLog(t, 1, natslog.Options{Replicas: 1})
	const events = 50
	store, err := buffer.Open(t.TempDir(), buffer.Options{Durability: buffer.DurabilityNone})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	devices := map[string]string{"dev-7": "", "site.3": "edgeflow-site-3"} // device -> client id
	for device, clientID := range devices {
		st, err := store.Stream(device, buffer.StreamOptions{})
		if err != nil {
			t.Fatal(err)
		}
		recs := make([][]byte, events)
		for i := range recs {
			recs[i] = agentEvent(t, i)
		}
		if _, err := st.Append(ctx, recs); err != nil {
			t.Fatal(err)
		}
		u, err := uplink.New(st, uplink.Options{DeviceID: device, ClientID: clientID, Brokers: []string{c.Nodes[0].MQTTURL()}})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { defer close(done); _ = u.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
		u.Notify()
	}
	// The hub never answers here, so the uplink resends: collect the
	// sequences each device's partition holds until all arrived.
	for device := range devices {
		p := natslog.PartitionOf(device, l.Options().Partitions)
		rctx, rcancel := context.WithTimeout(context.Background(), within)
		r := openReader(rctx, t, l, p, 0)
		seen := map[uint64]bool{}
		for len(seen) < events {
			m, err := r.Next(rctx)
			if err != nil {
				t.Fatalf("%s: %d of %d events in partition %d, then: %v", device, len(seen), events, p, err)
			}
			if m.Device != device {
				continue // another device of the same partition
			}
			b, err := wire.DecodeBatch(m.Data, wire.Limits{})
			if err != nil {
				t.Fatalf("%s: seq %d is not a batch: %v", device, m.Seq, err)
			}
			if b.GetDeviceId() != device {
				t.Fatalf("batch on %s's subject names device %q", device, b.GetDeviceId())
			}
			for i := range b.GetEvents() {
				seen[b.GetFirstSeq()+uint64(i)] = true
			}
		}
		r.Close()
		rcancel()
	}
}

// TestNATSRefusesDottedClientID pins the NATS behaviour that makes the
// agent's default client id (edgeflow- + device id) unusable for a device
// id with a dot: the CONNACK refuses the identifier.
func TestNATSRefusesDottedClientID(t *testing.T) {
	c, _, _ := startLog(t, 1, natslog.Options{Replicas: 1})
	o := mqtt.NewClientOptions().AddBroker(c.Nodes[0].MQTTURL()).SetClientID("edgeflow-site.3").
		SetProtocolVersion(4).SetAutoReconnect(false).SetConnectTimeout(10 * time.Second)
	tok := mqtt.NewClient(o).Connect()
	if !tok.WaitTimeout(within) {
		t.Fatal("no CONNACK")
	}
	if !errors.Is(tok.Error(), packets.ErrorRefusedIDRejected) {
		t.Fatalf("connect as edgeflow-site.3: %v, want identifier rejected", tok.Error())
	}
}

// agentEvent encodes event i as an agent's ingest does.
func agentEvent(t *testing.T, i int) []byte {
	b, err := proto.Marshal(&wirepb.Event{
		Metric: "temp", Value: float64(i), DeviceTimeNs: time.Date(2026, 1, 1, 0, 0, i, 0, time.UTC).UnixNano(),
		MonoNs: int64(i) * 1000, BootId: "b1", Method: wirepb.TimeMethod_TIME_METHOD_NTP,
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestAgentUplinkFailsOver gives the agent's uplink two of three servers'
// MQTT listeners and SIGKILLs the first while the device keeps sending:
// the uplink reconnects through the second URL and every event reaches
// the R3 stream.
func TestAgentUplinkFailsOver(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three nats-server processes")
	}
	c, _, l := startLog(t, 3, natslog.Options{Partitions: 8})
	store, err := buffer.Open(t.TempDir(), buffer.Options{Durability: buffer.DurabilityNone})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const device, half = "dev-failover", 40
	st, err := store.Stream(device, buffer.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	appendEvents := func(from int) {
		recs := make([][]byte, half)
		for i := range recs {
			recs[i] = agentEvent(t, from+i)
		}
		if _, err := st.Append(ctx, recs); err != nil {
			t.Fatal(err)
		}
	}
	u, err := uplink.New(st, uplink.Options{
		DeviceID: device, Brokers: []string{c.Nodes[0].MQTTURL(), c.Nodes[1].MQTTURL()},
		AckTimeout: time.Second, BackoffMin: 100 * time.Millisecond, BackoffMax: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = u.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	p := natslog.PartitionOf(device, l.Options().Partitions)
	appendEvents(0)
	u.Notify()
	waitEvents(t, l, p, device, half)
	c.Kill(0)
	t.Logf("killed %s, the uplink's first broker", c.Nodes[0].Name)
	appendEvents(half)
	u.Notify()
	waitEvents(t, l, p, device, 2*half)
}

// waitEvents reads partition p from its start until device's events
// 1..n (buffer sequences) have all been seen, reopening the reader after
// an error (a leader change) until the bound.
func waitEvents(t *testing.T, l *natslog.Log, p int, device string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*within)
	defer cancel()
	seen := map[uint64]bool{}
	for len(seen) < n {
		r := openReader(ctx, t, l, p, 0)
		for len(seen) < n {
			m, err := r.Next(ctx)
			if err != nil {
				if ctx.Err() != nil {
					t.Fatalf("%s: %d of %d events in partition %d, then: %v", device, len(seen), n, p, err)
				}
				t.Logf("read partition %d: %v; reopening", p, err)
				break
			}
			if m.Device != device {
				continue
			}
			b, err := wire.DecodeBatch(m.Data, wire.Limits{})
			if err != nil {
				t.Fatalf("%s: seq %d is not a batch: %v", device, m.Seq, err)
			}
			for i := range b.GetEvents() {
				seen[b.GetFirstSeq()+uint64(i)] = true
			}
		}
		r.Close()
	}
}
