package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"edgeflow/hub"
	"edgeflow/hub/hublog"
	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// rebuildTestConfig is the hubd configuration of TestRebuildCommand:
// streams idle after 2 s so windows become final soon.
const rebuildTestConfig = `aggregate:
  idle_timeout: 2s
  watermark_interval: 1ns
  tag_keys: [site]
  windows:
    - {name: 1m, kind: tumbling, size: 1m}
    - {name: 5m-by-1m, kind: hopping, size: 5m, slide: 1m}
`

// startConfigHub starts a hub in-process from hubd's command-line
// arguments, as `hubd` would build it.
func startConfigHub(t *testing.T, args []string) *hub.Server {
	t.Helper()
	cfg, err := loadConfig(args)
	if err != nil {
		t.Fatal(err)
	}
	cfg.hub.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	return startTestHub(t, cfg.hub)
}

// runRebuildCmd runs `hubd rebuild args...` and returns its exit code and
// stderr; a run that does not return (say, a hub started instead) fails
// the test.
func runRebuildCmd(t *testing.T, args []string) (int, string) {
	t.Helper()
	type result struct {
		code   int
		stderr string
	}
	done := make(chan result, 1)
	go func() {
		var stderr bytes.Buffer
		code := run(append([]string{"rebuild"}, args...), io.Discard, &stderr)
		done <- result{code, stderr.String()}
	}()
	select {
	case r := <-done:
		return r.code, r.stderr
	case <-time.After(60 * time.Second):
		t.Fatal("hubd rebuild did not return within 60s")
		return 0, ""
	}
}

// rebuildAnswers are the hub's answers that a rebuild must reproduce.
func rebuildAnswers(t *testing.T, s *hub.Server, base time.Time) [][]byte {
	t.Helper()
	var out [][]byte
	for _, q := range []string{
		"/v1/aggregates?" + url.Values{"metric": {"temp"}, "window": {"1m"}, "group_by": {"device"},
			"from": {base.Add(-time.Hour).Format(time.RFC3339)}, "to": {base.Add(time.Hour).Format(time.RFC3339)}}.Encode(),
		"/v1/aggregates?" + url.Values{"metric": {"temp"}, "window": {"5m-by-1m"}, "group_by": {"site"},
			"from": {base.Add(-time.Hour).Format(time.RFC3339)}, "to": {base.Add(time.Hour).Format(time.RFC3339)}}.Encode(),
		"/v1/late",
	} {
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", q, nil))
		if rec.Code != 200 {
			t.Fatalf("%s: %d %s", q, rec.Code, rec.Body)
		}
		out = append(out, rec.Body.Bytes())
	}
	return out
}

// settledAnswers waits until the streams are idle and the answers stop
// changing, and returns them.
func settledAnswers(t *testing.T, s *hub.Server, base time.Time) [][]byte {
	t.Helper()
	time.Sleep(2500 * time.Millisecond) // idle_timeout: the watermark reaches what was sent
	prev := rebuildAnswers(t, s, base)
	for deadline := time.Now().Add(10 * time.Second); ; {
		time.Sleep(200 * time.Millisecond)
		cur := rebuildAnswers(t, s, base)
		if fmt.Sprint(cur) == fmt.Sprint(prev) {
			return cur
		}
		if time.Now().After(deadline) {
			t.Fatal("answers keep changing")
		}
		prev = cur
	}
}

// TestRebuildCommand runs `hubd rebuild` on the data directory of a hub
// that ingested on-time, late and beyond-horizon events and was stopped:
// it exits 0, reports the events it applied, and the restarted hub
// answers exactly as before. While the hub runs, the rebuild refuses.
func TestRebuildCommand(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "hubd.yaml")
	if err := os.WriteFile(file, []byte(rebuildTestConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"--config", file, "--data-dir", filepath.Join(dir, "data"), "--http-addr", "127.0.0.1:0",
		"--mqtt-listen", "127.0.0.1:0", "--tick-interval", "50ms", "--log-level", "info"}
	s := startConfigHub(t, args)
	base := time.Now().UTC().Truncate(time.Minute).Add(-2 * time.Hour)
	seq := map[string]uint64{}
	stream := map[string]wire.StreamID{"dev-a": wire.NewStreamID(), "dev-b": wire.NewStreamID()}
	var events uint64
	publish := func(dev string, times ...time.Time) {
		t.Helper()
		sid := stream[dev]
		b := &wirepb.Batch{DeviceId: dev, StreamId: sid[:], FirstSeq: seq[dev] + 1, SendTimeNs: time.Now().UnixNano(),
			Clock: &wirepb.ClockEstimate{Method: wirepb.TimeMethod_TIME_METHOD_NTP}}
		for i, ts := range times {
			b.Events = append(b.Events, &wirepb.Event{Metric: "temp", Value: float64((int(seq[dev])+i)%37) - 9, DeviceTimeNs: ts.UnixNano(),
				Tags: []*wirepb.Tag{{Key: "site", Value: dev[len(dev)-1:]}}, MonoNs: int64(seq[dev]) + int64(i), BootId: "b",
				Method: wirepb.TimeMethod_TIME_METHOD_NTP})
		}
		seq[dev] += uint64(len(times))
		events += uint64(len(times))
		payload, err := wire.EncodeBatch(b)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Publish(wire.BatchTopic(dev), payload); err != nil {
			t.Fatal(err)
		}
	}
	secs := func(from, to int) []time.Time {
		var out []time.Time
		for i := from; i < to; i++ {
			out = append(out, base.Add(time.Duration(i)*time.Second))
		}
		return out
	}
	for r := 0; r < 4; r++ {
		publish("dev-a", secs(r*60, r*60+60)...)
		publish("dev-b", secs(r*60+7, r*60+67)...)
	}
	waitEvents(t, s, base, events)
	settledAnswers(t, s, base) // windows final
	// dev-a back with late events for a final window and one beyond the horizon
	publish("dev-a", append(secs(90, 100), base.Add(-100*time.Hour))...)
	waitEvents(t, s, base, events-1)
	before := settledAnswers(t, s, base)
	if !bytes.Contains(before[0], []byte(`"revision":1`)) || !bytes.Contains(before[2], []byte(`"value"`)) {
		t.Fatalf("no revised window or late-log entry to rebuild:\n%s\n%s", before[0], before[2])
	}

	if code, stderr := runRebuildCmd(t, args); code != 1 {
		t.Fatalf("rebuild beside a running hub: exit %d, want 1: %s", code, stderr)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	code, stderr := runRebuildCmd(t, args)
	if code != 0 {
		t.Fatalf("rebuild: exit %d: %s", code, stderr)
	}
	m := regexp.MustCompile(`msg="aggregates rebuilt from the log".* events=(\d+)`).FindStringSubmatch(stderr)
	if m == nil || m[1] != fmt.Sprint(events) {
		t.Fatalf("rebuild log does not report %d events: %s", events, stderr)
	}

	s2 := startConfigHub(t, args)
	after := rebuildAnswers(t, s2, base)
	for i := range before {
		if !bytes.Equal(before[i], after[i]) {
			t.Fatalf("answer %d differs after rebuild and restart:\nbefore %s\nafter  %s", i, before[i], after[i])
		}
	}
}

// alertsAnswer is the hub's GET /v1/alerts (every alert).
func alertsAnswer(t *testing.T, s *hub.Server) []byte {
	t.Helper()
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/v1/alerts?limit=10000", nil))
	if rec.Code != 200 {
		t.Fatalf("/v1/alerts: %d %s", rec.Code, rec.Body)
	}
	return rec.Body.Bytes()
}

// TestRebuildRecomputesAlerts: `hubd rebuild` replays the rules with the
// engine. With the rules the hub ran with, the restarted hub lists the same
// alerts (ids, revisions, fired_at) and the rebuild says they did not
// change; a rebuild with another threshold lists other alerts; a rebuild
// back with the first rules lists the first alerts again, byte for byte.
func TestRebuildRecomputesAlerts(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "hubd.yaml")
	config := func(count int) {
		t.Helper()
		c := rebuildTestConfig + fmt.Sprintf(`rules:
  - {name: busy, metric: temp, window: "tumbling:1m", agg: count, op: ">", value: %d, group_by: [device]}
  - {name: hot, metric: temp, window: "tumbling:1m", agg: max, op: ">=", value: 27, group_by: [site]}
alert_outputs: [{name: bus, kind: mqtt, topic: edgeflow/alerts}]
`, count)
		if err := os.WriteFile(file, []byte(c), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	config(55)
	args := []string{"--config", file, "--data-dir", filepath.Join(dir, "data"), "--http-addr", "127.0.0.1:0",
		"--mqtt-listen", "127.0.0.1:0", "--tick-interval", "50ms", "--log-level", "info"}
	s := startConfigHub(t, args)
	base := time.Now().UTC().Truncate(time.Minute).Add(-2 * time.Hour)
	stream := map[string]wire.StreamID{"dev-a": wire.NewStreamID(), "dev-b": wire.NewStreamID()}
	seq := map[string]uint64{}
	var events uint64
	publish := func(dev string, from, to int) {
		t.Helper()
		sid := stream[dev]
		b := &wirepb.Batch{DeviceId: dev, StreamId: sid[:], FirstSeq: seq[dev] + 1, SendTimeNs: time.Now().UnixNano(),
			Clock: &wirepb.ClockEstimate{Method: wirepb.TimeMethod_TIME_METHOD_NTP}}
		for i := from; i < to; i++ {
			b.Events = append(b.Events, &wirepb.Event{Metric: "temp", Value: float64((int(seq[dev])+i)%37) - 9,
				DeviceTimeNs: base.Add(time.Duration(i) * time.Second).UnixNano(), Tags: []*wirepb.Tag{{Key: "site", Value: dev[len(dev)-1:]}},
				MonoNs: int64(seq[dev]) + int64(i), BootId: "b", Method: wirepb.TimeMethod_TIME_METHOD_NTP})
		}
		seq[dev] += uint64(to - from)
		events += uint64(to - from)
		payload, err := wire.EncodeBatch(b)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Publish(wire.BatchTopic(dev), payload); err != nil {
			t.Fatal(err)
		}
	}
	for r := 0; r < 4; r++ {
		publish("dev-a", r*60, r*60+60)
		publish("dev-b", r*60+7, r*60+67)
	}
	waitEvents(t, s, base, events)
	settledAnswers(t, s, base)
	publish("dev-a", 90, 100) // late: revises busy/device=dev-a's second minute
	waitEvents(t, s, base, events)
	settledAnswers(t, s, base)
	before := alertsAnswer(t, s)
	if !bytes.Contains(before, []byte(`"revision":2`)) || !bytes.Contains(before, []byte(`"rule":"hot"`)) {
		t.Fatalf("test data: want a revised alert and a hot alert: %s", before)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	rebuildAndList := func(wantChanged bool) []byte {
		t.Helper()
		code, stderr := runRebuildCmd(t, args)
		if code != 0 {
			t.Fatalf("rebuild: exit %d: %s", code, stderr)
		}
		m := regexp.MustCompile(`msg="alerts recomputed from the log" alerts=(\d+) changed=(\w+) alert_seq=(\d+)`).FindStringSubmatch(stderr)
		if m == nil || m[2] != fmt.Sprint(wantChanged) {
			t.Fatalf("rebuild does not report alerts changed=%v: %s", wantChanged, stderr)
		}
		// The output's position: where it was (everything delivered) or,
		// after a change, the rebuilt sequence with an empty change log.
		st, err := hublog.OpenStore(filepath.Join(dir, "data"), false, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		pos, err := st.LoadAlertOutputPositions()
		first, last, err2 := st.AlertChangeBounds()
		st.Close()
		if err != nil || err2 != nil || fmt.Sprint(pos["bus"]) != m[3] && wantChanged || first != 0 && wantChanged {
			t.Fatalf("after the rebuild: output position %v (rebuilt sequence %s), change log %d..%d, %v %v", pos, m[3], first, last, err, err2)
		}
		s := startConfigHub(t, args)
		defer s.Shutdown(context.Background())
		return alertsAnswer(t, s)
	}
	if got := rebuildAndList(false); !bytes.Equal(got, before) {
		t.Fatalf("alerts differ after a rebuild with the same rules:\nbefore %s\nafter  %s", before, got)
	}
	config(65)
	other := rebuildAndList(true)
	// busy > 65: only dev-a's minute with the late events (70) crosses.
	if n := bytes.Count(other, []byte(`"rule":"busy"`)); bytes.Equal(other, before) || n != 1 {
		t.Fatalf("a rebuild with busy > 65 lists %d busy alerts, want 1: %s", n, other)
	}
	config(55)
	if got := rebuildAndList(true); !bytes.Equal(got, before) {
		t.Fatalf("alerts differ after rebuilding back to the first rules:\nbefore %s\nafter  %s", before, got)
	}
}
