package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"edgeflow/hub/hubapi"
	"edgeflow/internal/testnats"
	"edgeflow/internal/testproc"
	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// TestClusterConfig reads cluster mode's keys from a file, HUBD_* and
// flags, each overriding the one before; without nats-url the stream
// keys are unused.
func TestClusterConfig(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "hubd.yaml")
	yaml := "nats-url: nats://a:4222,nats://b:4222\nnats-stream: FLEET\nnats-partitions: 16\nnats-max-bytes: 2GiB\nnats-user: hub\n"
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HUBD_NATS_PARTITIONS", "32")
	t.Setenv("HUBD_NATS_PASSWORD", "from-env")
	cfg, err := loadConfig([]string{"--config", file, "--nats-replicas", "1", "--nats-max-age", "48h"})
	if err != nil {
		t.Fatal(err)
	}
	n := cfg.hub.NATS
	if strings.Join(n.URLs, " ") != "nats://a:4222 nats://b:4222" || n.Log.Stream != "FLEET" || n.Log.Partitions != 32 ||
		n.Log.Replicas != 1 || n.Log.MaxAge != 48*time.Hour || n.Log.MaxBytes != 2<<30 || n.User != "hub" || n.Password != "from-env" {
		t.Fatalf("got %+v", n)
	}
	cfg, err = loadConfig([]string{"--data-dir", dir})
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.hub.NATS.URLs) != 0 || cfg.hub.NATS.Log.Partitions != 0 {
		t.Fatalf("without nats-url: %+v", cfg.hub.NATS)
	}
}

// TestBadClusterConfigNamesKey: hubd refuses each bad cluster setting
// with exit 2 and a message naming the key (both keys for nats-url with
// mqtt-url).
func TestBadClusterConfigNamesKey(t *testing.T) {
	cert := filepath.Join(t.TempDir(), "cert.pem")
	_ = os.WriteFile(cert, []byte("x"), 0o600)
	url := []string{"--nats-url", "nats://127.0.0.1:4222"}
	withYAML := func(name, yaml string) []string {
		f := filepath.Join(t.TempDir(), name+".yaml")
		if err := os.WriteFile(f, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		return append([]string{"--config", f}, url...)
	}
	tests := []struct {
		name string
		args []string
		keys []string
	}{
		{"scheme", []string{"--nats-url", "http://x:1"}, []string{"nats-url"}},
		{"with mqtt-url", append([]string{"--mqtt-url", "tcp://x:1883"}, url...), []string{"nats-url", "mqtt-url"}},
		{"partitions 0", append([]string{"--nats-partitions", "0"}, url...), []string{"nats-partitions"}},
		{"partitions 2000", append([]string{"--nats-partitions", "2000"}, url...), []string{"nats-partitions"}},
		{"replicas", append([]string{"--nats-replicas", "7"}, url...), []string{"nats-replicas"}},
		{"max age", append([]string{"--nats-max-age", "10s"}, url...), []string{"nats-max-age"}},
		{"max bytes", append([]string{"--nats-max-bytes", "4KiB"}, url...), []string{"nats-max-bytes"}},
		{"stream", append([]string{"--nats-stream", "a.b"}, url...), []string{"nats-stream"}},
		{"user alone", append([]string{"--nats-user", "u"}, url...), []string{"nats-user"}},
		{"two auths", append([]string{"--nats-token", "t", "--nats-user", "u", "--nats-password", "p"}, url...), []string{"nats-creds"}},
		{"cert alone", append([]string{"--nats-tls-cert", cert}, url...), []string{"nats-tls-cert"}},
		{"creds missing", append([]string{"--nats-creds", "/no/such/file"}, url...), []string{"nats-creds"}},
		{"group", append([]string{"--group", "g"}, url...), []string{"group"}},
		{"demo", append([]string{"--demo"}, url...), []string{"nats-url", "demo"}},
		{"advertise url", append([]string{"--http-advertise-url", "ftp://x"}, url...), []string{"http-advertise-url"}},
		{"rules", withYAML("rules", "rules:\n  - {name: hot, metric: temp, window: tumbling:10s, agg: avg, op: \">\", value: 80}\n"), []string{"rules", "cluster mode"}},
		{"sinks", withYAML("sinks", "sinks:\n  - {name: ev, kind: postgres_events, dsn: postgres://x@127.0.0.1/test, table: t}\n"), []string{"sinks", "cluster mode"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			args := append([]string{"--data-dir", t.TempDir(), "--http-addr", "127.0.0.1:0"}, tt.args...)
			code := run(args, io.Discard, &stderr)
			for _, k := range tt.keys {
				if code != 2 || !strings.Contains(stderr.String(), k) {
					t.Fatalf("exit %d, stderr %q: want 2 naming %q", code, stderr.String(), k)
				}
			}
		})
	}
}

// clusterHubd is a hubd process in cluster mode.
type clusterHubd struct {
	cmd  *exec.Cmd
	http string
	out  *lockedBuf
	done chan struct{}
}

type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startClusterHubd runs hubd on dataDir against c's servers.
func startClusterHubd(t *testing.T, c *testnats.Cluster, dataDir string, extra ...string) *clusterHubd {
	t.Helper()
	h := &clusterHubd{http: freeAddr(t), out: &lockedBuf{}, done: make(chan struct{})}
	args := append([]string{"--data-dir", dataDir, "--http-addr", h.http, "--nats-url", c.URLs(), "--nats-replicas", "1",
		"--nats-partitions", "8", "--log-level", "info"}, extra...)
	h.cmd = exec.Command(hubdBinary(t), args...)
	h.cmd.Stdout, h.cmd.Stderr = h.out, h.out
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = h.cmd.Wait(); close(h.done) }()
	t.Cleanup(func() { h.kill(t) })
	return h
}

// kill crashes hubd (SIGKILL).
func (h *clusterHubd) kill(t *testing.T) {
	if err := testproc.Kill(h.cmd, h.done, 10*time.Second); err != nil {
		t.Error(err)
	}
}

// waitReady waits for /readyz 200.
func (h *clusterHubd) waitReady(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-h.done:
			t.Fatalf("hubd exited:\n%s", h.out.String())
		default:
		}
		if resp, err := http.Get("http://" + h.http + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("hubd not ready after 60s:\n%s", h.out.String())
}

// streamInfo returns device's stream as /v1/devices/{id} shows it.
func (h *clusterHubd) streamInfo(t *testing.T, device string) (hubapi.StreamInfo, bool) {
	resp, err := http.Get("http://" + h.http + "/v1/devices/" + device)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var d hubapi.DeviceInfo
	if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&d) != nil || len(d.Streams) != 1 {
		return hubapi.StreamInfo{}, false
	}
	return d.Streams[0], true
}

// natsDevice publishes batches over NATS' MQTT listener and collects the
// acks that come back.
type natsDevice struct {
	id     string
	sid    wire.StreamID
	cl     mqtt.Client
	mu     sync.Mutex
	acks   map[uint64]map[wirepb.AckStatus]bool // first seq -> the statuses it was answered with
	frames map[uint64][]byte
}

func newNATSDevice(t *testing.T, url, id string) *natsDevice {
	d := &natsDevice{id: id, sid: wire.NewStreamID(), acks: map[uint64]map[wirepb.AckStatus]bool{}, frames: map[uint64][]byte{}}
	o := mqtt.NewClientOptions().AddBroker(url).SetClientID("test-" + id).SetProtocolVersion(4).SetCleanSession(true).
		SetAutoReconnect(true).SetConnectTimeout(10 * time.Second)
	d.cl = mqtt.NewClient(o)
	if tok := d.cl.Connect(); !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
		t.Fatalf("mqtt connect %s: %v", url, tok.Error())
	}
	t.Cleanup(func() { d.cl.Disconnect(100) })
	tok := d.cl.Subscribe(wire.AckTopic(id), 1, func(_ mqtt.Client, m mqtt.Message) {
		a, err := wire.DecodeAck(m.Payload(), wire.Limits{})
		if err != nil {
			return
		}
		d.mu.Lock()
		for first := range d.frames {
			if first >= a.GetFirstSeq() && first <= a.GetLastSeq() {
				if d.acks[first] == nil {
					d.acks[first] = map[wirepb.AckStatus]bool{}
				}
				d.acks[first][a.GetStatus()] = true
			}
		}
		d.mu.Unlock()
	})
	if !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	return d
}

// send publishes batch k (20 events, sequence numbers 20k+1..20k+20).
func (d *natsDevice) send(t *testing.T, k int) {
	first := uint64(20*k + 1)
	d.mu.Lock()
	payload := d.frames[first]
	d.mu.Unlock()
	if payload == nil {
		b := &wirepb.Batch{DeviceId: d.id, StreamId: d.sid[:], FirstSeq: first, SendTimeNs: time.Now().UnixNano(),
			Clock: &wirepb.ClockEstimate{Method: wirepb.TimeMethod_TIME_METHOD_NTP}}
		for i := range 20 {
			b.Events = append(b.Events, &wirepb.Event{Metric: "temp", Value: float64(k*20 + i), DeviceTimeNs: time.Now().UnixNano(),
				MonoNs: int64(first) + int64(i), BootId: "b", Method: wirepb.TimeMethod_TIME_METHOD_NTP})
		}
		var err error
		if payload, err = wire.EncodeBatch(b); err != nil {
			t.Fatal(err)
		}
		d.mu.Lock()
		d.frames[first] = payload
		d.mu.Unlock()
	}
	tok := d.cl.Publish(wire.BatchTopic(d.id), 1, false, payload)
	if !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
		t.Fatalf("publish: %v", tok.Error())
	}
}

// waitAcks resends batches 0..n-1 that have no ack in want until each
// has one, as an agent resends unanswered batches.
func (d *natsDevice) waitAcks(t *testing.T, n int, want ...wirepb.AckStatus) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var missing []int
		d.mu.Lock()
		for k := range n {
			okStatus := false
			for _, w := range want {
				okStatus = okStatus || d.acks[uint64(20*k+1)][w]
			}
			if !okStatus {
				missing = append(missing, k)
			}
		}
		d.mu.Unlock()
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: batches %v have no ack in %v after 60s", d.id, missing, want)
		}
		for _, k := range missing {
			d.send(t, k)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// checkStreams waits until each device's stream holds batches 0..n-1
// (20 events each) and checks each was applied once.
func checkStreams(t *testing.T, h *clusterHubd, devs []*natsDevice, n int) {
	t.Helper()
	want := uint64(20 * n)
	for _, d := range devs {
		var st hubapi.StreamInfo
		deadline := time.Now().Add(30 * time.Second)
		for {
			var ok bool
			if st, ok = h.streamInfo(t, d.id); ok && st.Events >= want {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %+v after 30s, want %d events", d.id, st, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if st.Events != want || st.Batches != uint64(n) || st.Applied.Len() != 1 || !st.Applied.Covers(1, want) {
			t.Fatalf("%s: %d events in %d batches, applied %v; want %d in %d, 1..%d", d.id, st.Events, st.Batches, st.Applied, want, n, want)
		}
	}
}

// TestBinaryClusterMode runs the hubd binary in cluster mode against a
// NATS server: batches published over NATS' MQTT listener are applied
// and acked; hubd is SIGKILLed, more batches wait in the stream, and a
// hubd restarted on the same data directory applies them once and answers
// every resend DUPLICATE; killed again right after a burst of batches,
// it ends with every batch applied once. A hubd configured with another partition count
// than the stream's refuses to start, saying what the stream has.
func TestBinaryClusterMode(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs hubd and nats-server")
	}
	c := testnats.Start(t, 1)
	data := t.TempDir()
	h := startClusterHubd(t, c, data)
	h.waitReady(t)
	devs := []*natsDevice{newNATSDevice(t, c.Nodes[0].MQTTURL(), "dev-a"), newNATSDevice(t, c.Nodes[0].MQTTURL(), "dev-b")}
	for _, d := range devs {
		for k := range 10 {
			d.send(t, k)
		}
	}
	for _, d := range devs {
		d.waitAcks(t, 10, wirepb.AckStatus_ACK_STATUS_OK)
	}
	h.kill(t)
	for _, d := range devs {
		for k := 10; k < 15; k++ {
			d.send(t, k) // NATS takes them into the stream with no hub running
		}
	}
	h = startClusterHubd(t, c, data)
	h.waitReady(t)
	for _, d := range devs {
		d.mu.Lock()
		clear(d.acks)
		d.mu.Unlock()
		// Every batch answered: the first ten DUPLICATE (resent), the rest
		// OK from the stream or DUPLICATE for a resend.
		d.waitAcks(t, 15, wirepb.AckStatus_ACK_STATUS_OK, wirepb.AckStatus_ACK_STATUS_DUPLICATE)
		for k := range 10 {
			d.send(t, k)
		}
	}
	checkStreams(t, h, devs, 15)

	// SIGKILL right after NATS took batches 15..26, while hubd reads,
	// commits and acks them; 27..39 arrive while it is down.
	for _, d := range devs {
		for k := 15; k < 27; k++ {
			d.send(t, k)
		}
	}
	h.kill(t)
	for _, d := range devs {
		for k := 27; k < 40; k++ {
			d.send(t, k)
		}
	}
	h = startClusterHubd(t, c, data)
	h.waitReady(t)
	for _, d := range devs {
		d.waitAcks(t, 40, wirepb.AckStatus_ACK_STATUS_OK, wirepb.AckStatus_ACK_STATUS_DUPLICATE)
	}
	checkStreams(t, h, devs, 40)
	h.kill(t)

	code, out := testproc.RunToExit(t, hubdBinary(t), []string{"--data-dir", t.TempDir(), "--http-addr", "127.0.0.1:0",
		"--nats-url", c.URLs(), "--nats-replicas", "1", "--nats-partitions", "16"}, nil, 60*time.Second)
	if code == 0 || !strings.Contains(out, "has 8 partitions, configured 16") {
		t.Fatalf("hubd with 16 partitions against an 8-partition stream: exit %d:\n%s", code, out)
	}
}
