package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// TestFutureStampedDeviceBounded: one device publishes, through hubd's
// embedded broker with a real MQTT client, events stamped in 2030 and
// 2031, 10 s apart (each in a window of its own). hubd keeps them out of
// every window, in its quarantine, so its live partials stay far below
// max_live_partials instead of growing by one per event; the quarantine's
// endpoint and metrics show every event, /v1/aggregates shows none, and
// after SIGKILL and restart (checkpoint plus log replay) the quarantine
// holds the same events, none counted twice.
//
// E2E_FUTURE_EVENTS sets the number of events (default 20,000) and
// E2E_QUARANTINE_SIZE hubd's quarantine_size (default: the number of
// events, so none is dropped); the test logs hubd's peak RSS, so
// E2E_FUTURE_EVENTS=500000 measures the memory a device can take this way.
func TestFutureStampedDeviceBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns hubd")
	}
	total := 20_000
	if s := os.Getenv("E2E_FUTURE_EVENTS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1000 || n%1000 != 0 {
			t.Fatalf("E2E_FUTURE_EVENTS=%q: want a multiple of 1000", s)
		}
		total = n
	}
	size := total
	if s := os.Getenv("E2E_QUARANTINE_SIZE"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 10 {
			t.Fatalf("E2E_QUARANTINE_SIZE=%q: want at least 10", s)
		}
		size = min(n, total)
	}
	const livePartialsCap = 5000
	t.Setenv("HUBD_AGGREGATE_MAX_LIVE_PARTIALS", strconv.Itoa(livePartialsCap))
	t.Setenv("HUBD_AGGREGATE_QUARANTINE_SIZE", strconv.Itoa(size))
	t.Setenv("HUBD_TICK_INTERVAL", "100ms")
	h := startHub(t, filepath.Join(t.TempDir(), "hub"), "")
	c := paho.NewClient(paho.NewClientOptions().AddBroker(h.brokerURL).SetClientID("e2e-future").SetCleanSession(true))
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connect: %v", tok.Error())
	}
	defer c.Disconnect(100)

	const dev, perBatch = "clock-2030", 1000
	id := wire.NewStreamID()
	y2030 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	y2031 := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
	for first := 1; first <= total; first += perBatch {
		b := &wirepb.Batch{DeviceId: dev, StreamId: id[:], FirstSeq: uint64(first), SendTimeNs: time.Now().UnixNano(),
			Clock: &wirepb.ClockEstimate{Method: wirepb.TimeMethod_TIME_METHOD_NTP}}
		for i := range perBatch {
			seq := first + i
			base := y2030 // half in 2030, half in 2031
			if seq > total/2 {
				base = y2031
			}
			ts := base.Add(time.Duration(seq%(total/2)) * 10 * time.Second)
			b.Events = append(b.Events, &wirepb.Event{Metric: "temp", Value: float64(seq), DeviceTimeNs: ts.UnixNano(),
				MonoNs: int64(seq), BootId: "b", Method: wirepb.TimeMethod_TIME_METHOD_NTP, UncertaintyNs: int64(time.Millisecond)})
		}
		payload, err := wire.EncodeBatch(b)
		if err != nil {
			t.Fatal(err)
		}
		if tok := c.Publish(wire.BatchTopic(dev), 1, false, payload); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("publish: %v", tok.Error())
		}
	}
	waitApplied(t, h, dev, uint64(total))
	logRSS(t, h)

	if live := metricValue(t, h, "edgeflow_aggregate_live_partials"); live >= livePartialsCap {
		t.Fatalf("%v live partials after %d future-stamped events of one device: want them quarantined, below max_live_partials=%d", live, total, livePartialsCap)
	}
	checkQuarantine(t, h, dev, total, size)
	q := fmt.Sprintf("/v1/aggregates?metric=temp&window=tumbling:1m&from=%s&to=%s",
		y2030.Add(-time.Hour).Format(time.RFC3339), y2031.Add(365*24*time.Hour).Format(time.RFC3339))
	var ag struct{ Windows []aggWindow }
	if err := json.Unmarshal(get(t, h, q), &ag); err != nil {
		t.Fatal(err)
	}
	if len(ag.Windows) != 0 {
		t.Fatalf("%d windows of quarantined events in /v1/aggregates, e.g. %+v", len(ag.Windows), ag.Windows[0])
	}

	time.Sleep(2500 * time.Millisecond) // let a checkpoint (every 2 s) cover part of the log
	h.kill()
	h.start()
	checkQuarantine(t, h, dev, total, size)
	if live := metricValue(t, h, "edgeflow_aggregate_live_partials"); live >= livePartialsCap {
		t.Fatalf("%v live partials after restart", live)
	}
}

// checkQuarantine checks, by hubd's endpoint and metrics, that it counted
// each of the device's total events once as quarantined, holds size of
// them (the nearest) and dropped the rest.
func checkQuarantine(t *testing.T, h *hubProc, dev string, total, size int) {
	t.Helper()
	var r struct {
		Events []struct {
			Device, Metric, Time, Reason string
			Seq                          uint64
		} `json:"events"`
		Next        uint64 `json:"next"`
		Held        int    `json:"held"`
		Quarantined uint64 `json:"quarantined"`
		Dropped     uint64 `json:"dropped"`
	}
	if err := json.Unmarshal(get(t, h, "/v1/quarantine?limit=10&device="+dev), &r); err != nil {
		t.Fatal(err)
	}
	if r.Held != size || r.Quarantined != uint64(total) || r.Dropped != uint64(total-size) || len(r.Events) != 10 {
		t.Fatalf("quarantine: held %d, quarantined %d, dropped %d, %d events listed; want %d held, %d quarantined, %d dropped",
			r.Held, r.Quarantined, r.Dropped, len(r.Events), size, total, total-size)
	}
	if e := r.Events[0]; e.Device != dev || e.Metric != "temp" || e.Reason != "future" || e.Seq != 1 || !strings.HasPrefix(e.Time, "2030-") {
		t.Fatalf("first quarantined event %+v", e)
	}
	if m := metricValue(t, h, "edgeflow_aggregate_quarantine_events"); m != float64(size) {
		t.Fatalf("edgeflow_aggregate_quarantine_events %v, want %d", m, size)
	}
	if m := metricValue(t, h, "edgeflow_aggregate_quarantine_dropped_events_total"); m != float64(total-size) {
		t.Fatalf("edgeflow_aggregate_quarantine_dropped_events_total %v, want %d", m, total-size)
	}
	if m := metricValue(t, h, "edgeflow_aggregate_quarantined_events_total"); m != float64(total) {
		t.Fatalf("edgeflow_aggregate_quarantined_events_total %v, want %d", m, total)
	}
}

// waitApplied waits until hubd applied events 1..n of the device's stream.
func waitApplied(t *testing.T, h *hubProc, dev string, n uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for {
		v, err := h.device(ctx, dev)
		if err == nil && len(v.Streams) == 1 && len(v.Streams[0].Applied) == 1 && v.Streams[0].Applied[0] == [2]uint64{1, n} {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("hubd did not apply events 1..%d of %s: %+v %v", n, dev, v, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// metricValue reads one unlabelled sample from hubd's /metrics.
func metricValue(t *testing.T, h *hubProc, name string) float64 {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(string(get(t, h, "/metrics"))))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", sc.Text(), err)
			}
			return f
		}
	}
	t.Fatalf("no metric %s in /metrics", name)
	return 0
}

// logRSS logs hubd's peak and current resident memory (Linux).
func logRSS(t *testing.T, h *hubProc) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", h.cmd.Process.Pid))
	if err != nil {
		t.Logf("hubd memory: %v", err)
		return
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmHWM") || strings.HasPrefix(l, "VmRSS") {
			out = append(out, strings.Join(strings.Fields(l), " "))
		}
	}
	t.Logf("hubd after the events were applied: %s", strings.Join(out, ", "))
}
