package e2e

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"

	"edgeflow/buffer"
	"edgeflow/hub"
	"edgeflow/hub/ranges"
	"edgeflow/uplink"
	"edgeflow/wire/wirepb"
)

// TestRateLimitedDeviceLosesNothing runs a hub with its embedded broker
// and a per-device rate limit well below what one agent (real buffer, real
// uplink) sends: the hub answers the excess RETRY_LATER, the uplink keeps
// those batches and resends them after a backoff, and in the end every
// event is applied exactly once, with no gap and no rejection.
func TestRateLimitedDeviceLosesNothing(t *testing.T) {
	const n = 3000
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	h, err := hub.New(hub.Options{DataDir: filepath.Join(t.TempDir(), "hub"), HTTPAddr: "127.0.0.1:0", MQTTListen: "127.0.0.1:0",
		Logger: log, MaxEventsPerSecond: 1000, EventsBurst: 200})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Shutdown(context.Background()) })

	store, err := buffer.Open(filepath.Join(t.TempDir(), "agent"), buffer.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	st, err := store.Stream("rl-dev", buffer.StreamOptions{Full: buffer.Block})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	recs := make([][]byte, n)
	for i := range recs {
		recs[i], _ = proto.Marshal(&wirepb.Event{Metric: "e2e.value", Value: float64(i + 1),
			DeviceTimeNs: now.Add(time.Duration(i-n) * time.Millisecond).UnixNano(), MonoNs: int64(i), BootId: "rl",
			Method: wirepb.TimeMethod_TIME_METHOD_DEVICE})
	}
	if _, err := st.Append(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
	m, err := uplink.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	up, err := uplink.New(st, uplink.Options{DeviceID: "rl-dev", Brokers: []string{"tcp://" + h.BrokerAddr()}, Logger: log,
		Metrics: m, MaxBatchEvents: 200, Window: 4, Linger: uplink.NoLinger, AckTimeout: 2 * time.Second,
		BackoffMin: 50 * time.Millisecond, BackoffMax: 500 * time.Millisecond, PollInterval: 20 * time.Millisecond,
		ConnectTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- up.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	deadline := time.Now().Add(2 * time.Minute) // a bound, not a measurement
	for st.Stats().Acked < n {
		if time.Now().After(deadline) {
			t.Fatalf("acked %d of %d events", st.Stats().Acked, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if r := counterOf(m.BatchesAcked.WithLabelValues("retry_later")); r == 0 {
		t.Fatal("no batch was answered retry_later: the rate limit was not exercised")
	}
	if r := counterOf(m.BatchesAcked.WithLabelValues("rejected")); r != 0 {
		t.Fatalf("%v batches rejected", r)
	}
	if r := counterOf(m.BatchesResent); r == 0 {
		t.Fatal("no batch was resent")
	}
	// The hub's registry is updated by its applier, after the ack: wait for
	// the last batch to reach it before checking what it holds.
	d, ok := h.Device("rl-dev")
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && (!ok || len(d.Streams) != 1 || d.Streams[0].Events < n); {
		time.Sleep(10 * time.Millisecond)
		d, ok = h.Device("rl-dev")
	}
	if !ok || len(d.Streams) != 1 {
		t.Fatalf("device: %+v", d)
	}
	s := d.Streams[0]
	applied := s.Applied.Ranges()
	if s.Events != n || len(applied) != 1 || applied[0] != (ranges.SeqRange{First: 1, Last: n}) || s.GapEvents != 0 {
		t.Fatalf("stream: events %d applied %v gap events %d, want %d in [1, %d] and no gap", s.Events, applied, s.GapEvents, n, n)
	}
	body := getBody(t, "http://"+h.HTTPAddr()+"/metrics")
	if !strings.Contains(body, `status="retry_later"`) {
		t.Fatal("/metrics has no retry_later batches")
	}
	t.Logf("%d events applied once; %v batches answered retry_later, %v resent", n,
		counterOf(m.BatchesAcked.WithLabelValues("retry_later")), counterOf(m.BatchesResent))
}

func getBody(t testing.TB, u string) string {
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// counterOf reads one counter.
func counterOf(c prometheus.Counter) float64 {
	var d dto.Metric
	if err := c.Write(&d); err != nil {
		panic(err)
	}
	return d.GetCounter().GetValue()
}
