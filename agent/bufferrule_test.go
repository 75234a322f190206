package agent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"edgeflow/aggregate"
	"edgeflow/buffer"
	"edgeflow/hub"
	"edgeflow/hub/rules"
	"edgeflow/internal/testbroker"
)

// TestBufferRuleFiresBeforeDrop: a real agent with a 64 KiB buffer fills
// it past three quarters while its hub is down; the hub comes up with a
// buffer rule at 0.75. The agent's first status on the new connection
// carries the fill ratio, so the alert fires (value >= 0.75) while the
// agent has dropped nothing; the backlog then drains, every event
// reaches the hub, and the next status resolves the alert.
func TestBufferRuleFiresBeforeDrop(t *testing.T) {
	addr := fmt.Sprintf("127.0.0.1:%d", testbroker.FreePort(t))
	o := testOptions(t)
	o.Uplink.Brokers = []string{"tcp://" + addr}
	o.Uplink.StatusInterval = 200 * time.Millisecond
	const capBytes = 64 << 10
	o.Stream = buffer.StreamOptions{MaxBytes: capBytes}
	a := startAgent(t, o)
	n := 0
	for float64(a.Status().Buffer.Bytes) < 0.8*capBytes {
		var b strings.Builder
		for j := range 20 {
			fmt.Fprintf(&b, "{\"metric\":\"fill\",\"value\":%d}\n", n+j)
		}
		if code, _, raw := a.post(b.String()); code != 200 {
			t.Fatalf("%d %s", code, raw)
		}
		n += 20
	}
	bs := a.Status().Buffer
	if bs.DroppedSinceStart != 0 || bs.Depth != uint64(n) || bs.CapacityBytes != capBytes {
		t.Fatalf("test setup: buffer %+v after %d events, want all held in %d bytes", bs, n, capBytes)
	}
	t.Logf("buffer holds %d events, %d of %d bytes (%.2f), filling at %.0f B/s", n, bs.Bytes, capBytes,
		float64(bs.Bytes)/capBytes, bs.FillRate)

	rs, err := rules.ParseYAML([]byte(`rules: [{name: full, kind: buffer, fill_ratio: 0.75}]`))
	if err != nil {
		t.Fatal(err)
	}
	h, err := hub.New(hub.Options{DataDir: t.TempDir(), HTTPAddr: hub.HTTPOff, MQTTListen: addr,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Rules: rs,
		Aggregate: &aggregate.Options{Windows: []aggregate.WindowConfig{{Name: "1m", Kind: "tumbling", Size: time.Minute}}}})
	if err != nil {
		t.Fatal(err)
	}
	sub := h.SubscribeAlerts(16) // before Run: the feed misses nothing
	defer sub.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("hub: %v", err)
		}
	})

	next := func(what string) rules.Alert {
		t.Helper()
		select {
		case al := <-sub.Alerts():
			return al
		case <-time.After(30 * time.Second):
			t.Fatalf("no alert %s within 30s; agent %+v", what, a.Status().Buffer)
		}
		panic("unreachable")
	}
	fired := next("firing")
	if fired.Rule != "full" || fired.Group != "device="+o.DeviceID || fired.State != rules.Firing || fired.Value < 0.75 || fired.Value > 1 {
		t.Fatalf("first alert %+v, want full firing for %s at a ratio >= 0.75", fired, o.DeviceID)
	}
	if d := a.Status().Buffer.DroppedSinceStart; d != 0 {
		t.Fatalf("the agent dropped %d events", d)
	}
	resolved := next("resolved")
	if resolved.ID != fired.ID || resolved.State != rules.Resolved || resolved.Value >= 0.75 || resolved.Revision != 2 {
		t.Fatalf("second alert %+v, want %s resolved", resolved, fired.ID)
	}
	t.Logf("fired at ratio %.3f, resolved at %.3f after %v", fired.Value, resolved.Value, resolved.End.Sub(fired.Start))
	if info, _ := h.Device(o.DeviceID); info.Buffer == nil || info.Buffer.CapacityBytes == 0 || info.Buffer.Fill < 0 || info.Buffer.Fill > 1 ||
		info.Buffer.ReportedAt.IsZero() {
		t.Fatalf("the hub's device shows buffer %+v, want the agent's last reported fill", info.Buffer)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, ok := h.Device(o.DeviceID)
		if ok && len(info.Streams) == 1 && info.Streams[0].Applied.Count() == uint64(n) && a.Status().Buffer.Depth == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("hub device %+v; agent buffer %+v; want all %d events applied", info, a.Status().Buffer, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if d := a.Status().Buffer.DroppedSinceStart; d != 0 {
		t.Fatalf("the agent dropped %d events", d)
	}
}
