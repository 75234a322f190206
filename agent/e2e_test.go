package agent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"edgeflow/buffer"
	"edgeflow/hub"
	"edgeflow/internal/testbroker"
)

// startHub runs an in-process hub with its embedded broker on addr until
// the returned stop is called or the test ends.
func startHub(t *testing.T, dir, addr string) (*hub.Server, func()) {
	t.Helper()
	s, err := hub.New(hub.Options{DataDir: dir, HTTPAddr: hub.HTTPOff, MQTTListen: addr,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	testbroker.WaitTCP(t, addr, 10*time.Second)
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-done; err != nil {
				t.Errorf("hub: %v", err)
			}
		}
	}
	t.Cleanup(stop)
	return s, stop
}

// TestAgentToHub buffers events while the hub is down, uploads them when
// it comes up, and checks the hub applied every one; the agent syncs its
// clock through the hub's time service (no NTP) on its second connection.
func TestAgentToHub(t *testing.T) {
	addr := fmt.Sprintf("127.0.0.1:%d", testbroker.FreePort(t))
	o := testOptions(t)
	o.Uplink.Brokers = []string{"tcp://" + addr}
	o.TimeHub = true
	o.Clock.StartupPollInterval = 200 * time.Millisecond
	o.Clock.PollInterval = time.Second
	a := startAgent(t, o)
	const n = 500
	for i := 0; i < n; i += 50 {
		var b strings.Builder
		for j := range 50 {
			fmt.Fprintf(&b, "{\"metric\":\"e2e\",\"value\":%d}\n", i+j)
		}
		if code, _, raw := a.post(b.String()); code != 200 {
			t.Fatalf("%d %s", code, raw)
		}
	}
	if d := a.Status().Buffer.Depth; d != n {
		t.Fatalf("depth %d with the hub down, want %d", d, n)
	}
	h, _ := startHub(t, t.TempDir(), addr)
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, ok := h.Device(o.DeviceID)
		if ok && len(info.Streams) == 1 && info.Streams[0].Events == n && info.Streams[0].Applied.Count() == n &&
			a.Status().Buffer.Depth == 0 && a.Status().Clock.Method == "TIME_METHOD_HUB_SYNC" {
			if s := info.Streams[0].StreamID; s != a.Status().StreamID {
				t.Fatalf("hub has stream %s, agent %s", s, a.Status().StreamID)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("hub device %+v ok=%v; agent status %+v", info, ok, a.Status())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	if info, _ := h.Device(o.DeviceID); info.Online {
		t.Errorf("hub still sees the device online after a clean shutdown: %+v", info)
	}
}

// TestAgentSendsStoredColumnBlocks: with the edge agent's default block
// form (columns) and events stamped by a trusted clock, what the agent
// buffered while the hub was down goes as the blocks it stored (counted in
// edgeflow_uplink_batches_as_stored_total), and the hub applies every
// event once.
func TestAgentSendsStoredColumnBlocks(t *testing.T) {
	addr := fmt.Sprintf("127.0.0.1:%d", testbroker.FreePort(t))
	o := testOptions(t)
	o.Uplink.Brokers = []string{"tcp://" + addr}
	o.TrustDeviceClock = true
	o.Buffer.BlockCompression = buffer.CompressColumns
	a := startAgent(t, o)
	const n, per = 2000, 500 // half a batch (1000) or more: a block goes whole
	for i := 0; i < n; i += per {
		var b strings.Builder
		for j := range per {
			fmt.Fprintf(&b, "{\"metric\":\"cols\",\"value\":%d,\"tags\":{\"room\":\"r1\"}}\n", i+j)
		}
		if code, _, raw := a.post(b.String()); code != 200 {
			t.Fatalf("%d %s", code, raw)
		}
	}
	h, _ := startHub(t, t.TempDir(), addr)
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, ok := h.Device(o.DeviceID)
		if ok && len(info.Streams) == 1 && info.Streams[0].Events == n && info.Streams[0].Applied.Count() == n && a.Status().Buffer.Depth == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("hub device %+v ok=%v; agent status %+v", info, ok, a.Status())
		}
		time.Sleep(50 * time.Millisecond)
	}
	resp, err := http.Get(a.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var stored float64
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, "edgeflow_uplink_batches_as_stored_total "); ok {
			stored, _ = strconv.ParseFloat(v, 64)
		}
	}
	if stored < n/per {
		t.Fatalf("%v batches sent as stored, want the %d blocks the agent appended", stored, n/per)
	}
}
