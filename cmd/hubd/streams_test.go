package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// streamsAgent is a plain MQTT client publishing one device's batches
// and collecting the hub's acks by stream and first sequence number.
type streamsAgent struct {
	c    paho.Client
	mu   sync.Mutex
	acks map[string]*wirepb.Ack // by stream id + "/" + first_seq
}

func newStreamsAgent(t *testing.T, broker, device string) *streamsAgent {
	t.Helper()
	a := &streamsAgent{acks: map[string]*wirepb.Ack{}}
	a.c = paho.NewClient(paho.NewClientOptions().AddBroker("tcp://" + broker).SetClientID("agent-" + device).
		SetConnectTimeout(5 * time.Second).SetOrderMatters(false))
	if tok := a.c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connect %s: %v", broker, tok.Error())
	}
	t.Cleanup(func() { a.c.Disconnect(100) })
	tok := a.c.Subscribe(wire.AckTopic(device), 1, func(_ paho.Client, m paho.Message) {
		ack, err := wire.DecodeAck(m.Payload(), wire.Limits{})
		if err != nil {
			t.Errorf("bad ack: %v", err)
			return
		}
		a.mu.Lock()
		a.acks[fmt.Sprintf("%x/%d", ack.StreamId, ack.FirstSeq)] = ack
		a.mu.Unlock()
	})
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	return a
}

// send publishes b and waits for its ack.
func (a *streamsAgent) send(t *testing.T, b *wirepb.Batch) *wirepb.Ack {
	t.Helper()
	key := fmt.Sprintf("%x/%d", b.StreamId, b.FirstSeq)
	a.mu.Lock()
	delete(a.acks, key)
	a.mu.Unlock()
	payload, err := wire.EncodeBatch(b)
	if err != nil {
		t.Fatal(err)
	}
	if tok := a.c.Publish(wire.BatchTopic(b.DeviceId), 1, false, payload); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("publish: %v", tok.Error())
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		a.mu.Lock()
		ack := a.acks[key]
		a.mu.Unlock()
		if ack != nil {
			return ack
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no ack for %s", key)
	return nil
}

// streamsBatch is a batch of 10 events on stream sid, event times from base.
func streamsBatch(device string, sid wire.StreamID, base time.Time, k int) *wirepb.Batch {
	b := &wirepb.Batch{DeviceId: device, StreamId: sid[:], FirstSeq: 1, SendTimeNs: time.Now().UnixNano(),
		Clock: &wirepb.ClockEstimate{Method: wirepb.TimeMethod_TIME_METHOD_NTP}}
	for i := 0; i < 10; i++ {
		b.Events = append(b.Events, &wirepb.Event{Metric: "temp", Value: float64(k*10 + i),
			DeviceTimeNs: base.Add(time.Duration(k*10+i) * time.Second).UnixNano(), MonoNs: int64(i), BootId: "b",
			Method: wirepb.TimeMethod_TIME_METHOD_NTP})
	}
	return b
}

// deviceView is the part of GET /v1/devices/{id} this test reads.
type deviceView struct {
	StreamCount int `json:"stream_count"`
	MaxStreams  int `json:"max_streams"`
	Streams     []struct {
		StreamID string `json:"stream_id"`
		Events   uint64 `json:"events"`
	} `json:"streams"`
}

func getJSON(t *testing.T, u string, v any) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s", u, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
}

// wantBounded checks what hubd shows of the bounded device: its streams
// and their events in /v1/devices and /v1/devices/{id}, the stored
// events in /v1/events, and the streams gauge.
func wantBounded(t *testing.T, h *hubdRun, device string, accepted map[string]bool, base time.Time) {
	t.Helper()
	var one deviceView
	getJSON(t, "http://"+h.httpAddr+"/v1/devices/"+device, &one)
	if one.StreamCount != len(accepted) || one.MaxStreams != len(accepted) || len(one.Streams) != len(accepted) {
		t.Fatalf("/v1/devices/%s: stream_count %d, max_streams %d, %d streams; want %d", device, one.StreamCount, one.MaxStreams, len(one.Streams), len(accepted))
	}
	for _, st := range one.Streams {
		if !accepted[st.StreamID] || st.Events != 10 {
			t.Fatalf("stream %s with %d events; accepted: %v", st.StreamID, st.Events, accepted)
		}
	}
	var list struct {
		Devices []struct {
			ID          string `json:"id"`
			StreamCount int    `json:"stream_count"`
			MaxStreams  int    `json:"max_streams"`
		} `json:"devices"`
	}
	getJSON(t, "http://"+h.httpAddr+"/v1/devices", &list)
	found := false
	for _, d := range list.Devices {
		if d.ID == device {
			found = d.StreamCount == len(accepted) && d.MaxStreams == len(accepted)
		}
	}
	if !found {
		t.Fatalf("/v1/devices: %+v", list.Devices)
	}
	var evs struct {
		Events []struct {
			Stream string  `json:"stream"`
			Seq    uint64  `json:"seq"`
			Value  float64 `json:"value"`
		} `json:"events"`
	}
	q := url.Values{"device": {device}, "from": {base.Add(-time.Hour).Format(time.RFC3339)}, "to": {base.Add(2 * time.Hour).Format(time.RFC3339)}}
	getJSON(t, "http://"+h.httpAddr+"/v1/events?"+q.Encode(), &evs)
	perStream := map[string]int{}
	for _, e := range evs.Events {
		if !accepted[e.Stream] {
			t.Fatalf("event of a refused stream stored: %+v", e)
		}
		perStream[e.Stream]++
	}
	if len(evs.Events) != 10*len(accepted) || len(perStream) != len(accepted) {
		t.Fatalf("/v1/events: %d events of %d streams, want %d of %d", len(evs.Events), len(perStream), 10*len(accepted), len(accepted))
	}
	if v := metricValue(t, h.httpAddr, "edgeflow_hub_streams"); v != fmt.Sprint(len(accepted)) {
		t.Fatalf("edgeflow_hub_streams %q, want %d", v, len(accepted))
	}
}

// TestBinaryStreamsPerDeviceBounded: the real hubd with
// --max-streams-per-device 4 takes the first 4 streams of a device that
// publishes batches under 12 stream ids and answers the others
// RETRY_LATER too_many_streams with a retry_after, storing nothing of
// them; /v1/devices, /v1/events and /metrics show exactly the 4, and
// after kill -9 and a restart the same, the bound still holds and a
// redelivery on an accepted stream is still DUPLICATE.
func TestBinaryStreamsPerDeviceBounded(t *testing.T) {
	dir := t.TempDir()
	d := &damagedStore{config: filepath.Join(dir, "hubd.yaml"), dataDir: filepath.Join(dir, "data")}
	if err := os.WriteFile(d.config, []byte(rebuildTestConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	start := func() (*hubdRun, *streamsAgent) {
		broker := freeAddr(t)
		h := startHubd(t, d, "--mqtt-listen", broker, "--max-streams-per-device", "4", "--stream-idle-expiry", "2h")
		if !h.ready(t) {
			t.Fatalf("hubd exited:\n%s", h.output())
		}
		return h, newStreamsAgent(t, broker, "dev-many")
	}
	h, agent := start()
	base := time.Now().UTC().Truncate(time.Minute).Add(-30 * time.Minute)
	accepted := map[string]bool{}
	var sent []*wirepb.Batch
	for k := 0; k < 12; k++ {
		b := streamsBatch("dev-many", wire.NewStreamID(), base, k)
		sent = append(sent, b)
		ack := agent.send(t, b)
		switch ack.Status {
		case wirepb.AckStatus_ACK_STATUS_OK:
			accepted[fmt.Sprintf("%x", b.StreamId)] = true
		case wirepb.AckStatus_ACK_STATUS_RETRY_LATER:
			if !strings.HasPrefix(ack.Reason, "too_many_streams") || ack.RetryAfterNs <= 0 {
				t.Fatalf("refusal of stream %d: %v", k, ack)
			}
		default:
			t.Fatalf("stream %d: %v", k, ack)
		}
	}
	if len(accepted) != 4 {
		t.Fatalf("%d of 12 streams accepted, want 4", len(accepted))
	}
	wantBounded(t, h, "dev-many", accepted, base)
	if v := metricValue(t, h.httpAddr, `edgeflow_hub_rejected_batches_total{reason="too_many_streams"}`); v != "8" {
		t.Fatalf("too_many_streams rejections %q, want 8", v)
	}
	if v := metricValue(t, h.httpAddr, "edgeflow_hub_streams_retired_total"); v != "0" {
		t.Fatalf("streams_retired_total %q", v)
	}

	// kill -9, restart on the same store: the same streams, still bounded.
	if err := h.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-h.done
	agent.c.Disconnect(100)
	h, agent = start()
	wantBounded(t, h, "dev-many", accepted, base)
	if ack := agent.send(t, sent[0]); ack.Status != wirepb.AckStatus_ACK_STATUS_DUPLICATE {
		t.Fatalf("redelivery of an accepted stream's batch after restart: %v", ack)
	}
	if ack := agent.send(t, streamsBatch("dev-many", wire.NewStreamID(), base, 20)); ack.Status != wirepb.AckStatus_ACK_STATUS_RETRY_LATER ||
		!strings.HasPrefix(ack.Reason, "too_many_streams") {
		t.Fatalf("a new stream after restart: %v", ack)
	}
	wantBounded(t, h, "dev-many", accepted, base)
}

// TestStreamKeysFromFileEnvAndFlags: the two keys of the streams bound
// come from the file, the environment and flags like every other key.
func TestStreamKeysFromFileEnvAndFlags(t *testing.T) {
	file := filepath.Join(t.TempDir(), "hubd.yaml")
	if err := os.WriteFile(file, []byte("data-dir: d\nmax-streams-per-device: 5\nstream-idle-expiry: 2h\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig([]string{"--data-dir", "d"})
	if err != nil || cfg.hub.MaxStreamsPerDevice != 16 || cfg.hub.StreamIdleExpiry != 168*time.Hour {
		t.Fatalf("defaults: %v %+v", err, cfg)
	}
	cfg, err = loadConfig([]string{"--config", file})
	if err != nil || cfg.hub.MaxStreamsPerDevice != 5 || cfg.hub.StreamIdleExpiry != 2*time.Hour {
		t.Fatalf("file: %v %+v", err, cfg)
	}
	t.Setenv("HUBD_MAX_STREAMS_PER_DEVICE", "7")
	t.Setenv("HUBD_STREAM_IDLE_EXPIRY", "3h")
	if cfg, err = loadConfig([]string{"--config", file}); err != nil || cfg.hub.MaxStreamsPerDevice != 7 || cfg.hub.StreamIdleExpiry != 3*time.Hour {
		t.Fatalf("environment: %v", err)
	}
	cfg, err = loadConfig([]string{"--config", file, "--max-streams-per-device", "9", "--stream-idle-expiry", "4h"})
	if err != nil || cfg.hub.MaxStreamsPerDevice != 9 || cfg.hub.StreamIdleExpiry != 4*time.Hour {
		t.Fatalf("flags: %v", err)
	}
}
