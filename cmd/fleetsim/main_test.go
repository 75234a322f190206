package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"edgeflow/aggregate"
	"edgeflow/hub"
	"edgeflow/simulator"
)

func TestConfigsLoadAndValidate(t *testing.T) {
	files, err := filepath.Glob("../../configs/fleetsim-*.yaml")
	if err != nil || len(files) < 4 {
		t.Fatalf("scenario files: %v %v", files, err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			c, err := loadConfig([]string{"--scenario", f})
			if err != nil {
				t.Fatal(err)
			}
			sc := c.scenario
			sc.EnsureDefaults()
			if err := sc.Validate(); err != nil {
				t.Fatal(err)
			}
			if sc.Name == "custom" || sc.Devices < 100 {
				t.Errorf("scenario %q with %d devices: file not read?", sc.Name, sc.Devices)
			}
		})
	}
}

func TestFlagsOverrideScenario(t *testing.T) {
	t.Setenv("FLEETSIM_DURATION", "7s")
	c, err := loadConfig([]string{"--scenario", "../../configs/fleetsim-steady.yaml", "--devices", "7", "--rate", "3", "--time-scale", "2", "--hub", "127.0.0.1:9"})
	if err != nil {
		t.Fatal(err)
	}
	sc := c.scenario
	if sc.Devices != 7 || sc.Duration != 7*time.Second || sc.TimeScale != 2 || sc.Classes[0].Metrics[0].Rate != 3 {
		t.Errorf("overrides not applied: %+v", sc)
	}
	if sc.Buffer.SyncInterval != 10*time.Millisecond {
		t.Errorf("buffer.sync_interval %v: want the file's 10ms", sc.Buffer.SyncInterval)
	}
	if c.hub != "http://127.0.0.1:9" {
		t.Errorf("hub %q", c.hub)
	}
}

// TestSeveralHubs checks that --hub takes a cluster's hubs comma-separated,
// each without a scheme given http://, the first one being the hub asked first.
func TestSeveralHubs(t *testing.T) {
	c, err := loadConfig([]string{"--hub", "127.0.0.1:1, http://127.0.0.1:2,,https://h3:3"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"http://127.0.0.1:1", "http://127.0.0.1:2", "https://h3:3"}; !slices.Equal(c.hubs, want) || c.hub != want[0] {
		t.Errorf("hubs %q, hub %q: want %q", c.hubs, c.hub, want)
	}
	if c, err = loadConfig([]string{"--hub", ""}); err != nil || c.hub != "" || len(c.hubs) != 0 {
		t.Errorf("--hub \"\": hub %q hubs %q err %v, want none", c.hub, c.hubs, err)
	}
}

// TestSeveralMQTTURLs checks that --mqtt-url takes a comma-separated list
// (a cluster's MQTT listeners) and refuses an empty one.
func TestSeveralMQTTURLs(t *testing.T) {
	c, err := loadConfig([]string{"--mqtt-url", "tcp://127.0.0.1:1, tcp://127.0.0.1:2,,tcp://127.0.0.1:3"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"tcp://127.0.0.1:1", "tcp://127.0.0.1:2", "tcp://127.0.0.1:3"}; !slices.Equal(c.mqttURLs, want) {
		t.Errorf("mqtt urls %q, want %q", c.mqttURLs, want)
	}
	if _, err := loadConfig([]string{"--mqtt-url", " , "}); err == nil || !strings.Contains(err.Error(), "mqtt-url") {
		t.Errorf("empty --mqtt-url: %v, want an error naming mqtt-url", err)
	}
}

func TestUnknownScenarioKey(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "s.yaml")
	writeFile(t, path, "devices: 3\nclasses:\n  - name: a\n    metrics: [{name: x, rats: 2}]\n")
	_, err := loadConfig([]string{"--scenario", path})
	if err == nil || !strings.Contains(err.Error(), "rats") {
		t.Fatalf("err %v: want one naming the unknown key", err)
	}
}

// TestRunAndVerify runs the command against an in-process hub.
func TestRunAndVerify(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	// The hub's aggregate engine at the default scenario's resolution: the
	// windows are verified, and windows that cannot be read fail.
	srv, err := hub.New(hub.Options{DataDir: t.TempDir(), HTTPAddr: "127.0.0.1:0", MQTTListen: addr,
		Logger: slog.New(slog.DiscardHandler), Registerer: prometheus.NewRegistry(), Gatherer: prometheus.NewRegistry(),
		Aggregate: &aggregate.Options{Resolution: 10 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	truth := filepath.Join(t.TempDir(), "truth.gob")
	var out, errOut bytes.Buffer
	code := run([]string{"--devices", "20", "--rate", "5", "--duration", "3s", "--mqtt-url", "tcp://" + addr,
		"--hub", srv.HTTPAddr(), "--truth-out", truth, "--json"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
	}
	for _, want := range []string{`"type":"progress"`, `"type":"report"`, `"type":"verify"`, `"ok":true`, `"windows_unavailable":0`, `"measured":true`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %s:\n%s", want, out.String())
		}
	}
	out.Reset()
	if code := run([]string{"verify", "--truth", truth, "--hub", srv.HTTPAddr()}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "verify: OK") ||
		!strings.Contains(out.String(), "windows tumbling:10s temp: match ") || strings.Contains(out.String(), "match 0,") {
		t.Errorf("verify subcommand: exit %d\n%s%s", code, out.String(), errOut.String())
	}
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestProbeEveryFlag(t *testing.T) {
	c, err := loadConfig([]string{"--probe-every", "250ms"})
	if err != nil || c.probeEvery != 250*time.Millisecond {
		t.Fatalf("--probe-every 250ms: %v %v", c, err)
	}
	if c, err := loadConfig([]string{"--probe-every", "0"}); err != nil || c.probeEvery != 0 {
		t.Fatalf("--probe-every 0: %v %v", c, err)
	}
	for _, bad := range []string{"soon", "1ms"} {
		if _, err := loadConfig([]string{"--probe-every", bad}); err == nil || !strings.Contains(err.Error(), "--probe-every") {
			t.Fatalf("--probe-every %s: %v", bad, err)
		}
	}
}

// verifyTruth is a one-device truth: 6 events of metric m at 1, 9, 11, 25,
// 59 and 61 s, verified in 10 s tumbling windows.
func verifyTruth() *simulator.Truth {
	d := &simulator.DeviceTruth{Device: "d1", StreamID: "s1", Appended: 6, Buckets: map[simulator.BucketKey]*simulator.Agg{}}
	for _, e := range [][2]float64{{1, 1}, {9, 2}, {11, 4}, {25, -1}, {59, 8}, {61, 16}} {
		k := simulator.BucketKey{Metric: "m", Bucket: int64(e[0]) / 10}
		if d.Buckets[k] == nil {
			d.Buckets[k] = &simulator.Agg{}
		}
		d.Buckets[k].Add(e[1])
	}
	return &simulator.Truth{Scenario: "t", Resolution: 10 * time.Second, Metrics: []string{"m"},
		Windows: []string{"tumbling:10s"}, Devices: []*simulator.DeviceTruth{d}}
}

// verifyHub serves what `fleetsim verify` reads: the streams' applied
// ranges (applied events of each, from 1) and, unless aggStatus is set,
// the truth's own windows. It has no GET /v1/events.
func verifyHub(t *testing.T, tr *simulator.Truth, applied uint64, aggStatus, deviceStatus int) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/devices/{id}", func(w http.ResponseWriter, r *http.Request) {
		if deviceStatus != 0 {
			http.Error(w, "down", deviceStatus)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"streams": []any{map[string]any{
			"stream_id": tr.Devices[0].StreamID, "applied": [][2]uint64{{1, applied}}, "gaps": [][2]uint64{}}}})
	})
	mux.HandleFunc("GET /v1/aggregates", func(w http.ResponseWriter, r *http.Request) {
		if aggStatus != 0 {
			http.Error(w, "engine failed", aggStatus)
			return
		}
		q := r.URL.Query()
		win, err := simulator.ParseWindow(q.Get("window"), tr.Resolution)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		from, _ := time.Parse(time.RFC3339Nano, q.Get("from"))
		to, _ := time.Parse(time.RFC3339Nano, q.Get("to"))
		exp, _ := tr.Expected(win, q.Get("metric"))
		out := []map[string]any{}
		for k, a := range exp {
			if k.Start >= from.UnixNano() && k.Start < to.UnixNano() {
				out = append(out, map[string]any{"start": time.Unix(0, k.Start).UTC(), "group": map[string]string{"device": k.Device},
					"count": a.Count, "sum": a.Sum, "min": a.Min, "max": a.Max, "avg": a.Avg()})
			}
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"windows": out})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestVerifyExitCodes runs `fleetsim verify` against fake hubs: 0 when
// the hub's answers match the truth, 1 on loss, duplicates or windows not
// checked, 2 when verification cannot run.
func TestVerifyExitCodes(t *testing.T) {
	tr := verifyTruth()
	truth := filepath.Join(t.TempDir(), "truth.gob")
	fh, err := os.Create(truth)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Save(fh); err != nil {
		t.Fatal(err)
	}
	if err := fh.Close(); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name                              string
		applied                           uint64
		aggStatus, deviceStatus, wantCode int
		extra                             []string
		want                              []string
	}{
		{"clean", 6, 0, 0, 0, nil, []string{"verify: OK", "applied 6, lost 0, duplicated 0", "match 5, differ 0"}},
		{"truth claims more than applied", 4, 0, 0, 1, nil, []string{"verify: FAILED", "failed: 2 events lost", "lost 2"}},
		{"applied beyond appended", 8, 0, 0, 1, nil, []string{"verify: FAILED", "duplicated 2"}},
		{"windows not checked", 6, 500, 0, 1, nil, []string{"verify: FAILED", "not checked", "HTTP 500", "--allow-unavailable-windows"}},
		{"windows not checked, allowed", 6, 500, 0, 0, []string{"--allow-unavailable-windows"}, []string{"verify: OK", "not available"}},
		{"json", 4, 0, 0, 1, []string{"--json"}, []string{`"type":"verify"`, `"ok":false`, `"lost":2`}},
		{"hub failing", 6, 0, 500, 2, nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // a loss is final only after the verifier's 10 s settle
			hub := verifyHub(t, tr, tc.applied, tc.aggStatus, tc.deviceStatus)
			var out, errOut bytes.Buffer
			args := append([]string{"verify", "--truth", truth, "--hub", hub}, tc.extra...)
			if code := run(args, &out, &errOut); code != tc.wantCode {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.wantCode, out.String(), errOut.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
		})
	}
	t.Run("no truth", func(t *testing.T) {
		var out, errOut bytes.Buffer
		if code := run([]string{"verify", "--hub", "127.0.0.1:9"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "--truth") {
			t.Errorf("exit %d, stderr %q: want 2 naming --truth", code, errOut.String())
		}
	})
}

func TestProgressLine(t *testing.T) {
	r := simulator.Report{Elapsed: 12, Phase: "run", Devices: 10, Connected: 9, PublishRate: 100, AckRate: 99, Backlog: 3,
		AckLatency: simulator.Quantiles{Count: 100, P50Ms: 20, P99Ms: 80}, Reconnects: 2}
	probed := r
	probed.Visible = &simulator.Visibility{Latency: simulator.Quantiles{Count: 7, P50Ms: 310, P99Ms: 950, MaxMs: 990}}
	waiting := r
	waiting.Visible = &simulator.Visibility{}
	tests := []struct {
		name      string
		r         simulator.Report
		tty       bool
		want, not []string
	}{
		{"no probes", r, false, []string{"connected 9/10", "ack p50 20ms p99 80ms", "reconnects 2\n"}, []string{"visible"}},
		{"probes", probed, false, []string{"ack p50 20ms p99 80ms", "visible p50 310ms p99 950ms (7 probes)", "reconnects 2\n"}, nil},
		{"no probe yet", waiting, false, []string{"visible: no probe yet"}, []string{"visible p50"}},
		{"terminal", probed, true, []string{"\r\033[K", "visible p50 310ms p99 950ms"}, []string{"\n"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			(&output{w: &out, errw: &errOut, tty: tc.tty}).progress(tc.r)
			got := errOut.String()
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("progress %q lacks %q", got, w)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(got, n) {
					t.Errorf("progress %q has %q", got, n)
				}
			}
			if out.Len() != 0 {
				t.Errorf("progress wrote to stdout: %q", out.String())
			}
		})
	}
	t.Run("json", func(t *testing.T) {
		var out bytes.Buffer
		(&output{w: &out, errw: io.Discard, json: true}).progress(probed)
		if !strings.Contains(out.String(), `"visible":{"latency":{"count":7,"p50_ms":310,"p99_ms":950`) {
			t.Errorf("json progress %s: want the visible latency", out.String())
		}
	})
}

func TestFlagUsageNamesValues(t *testing.T) {
	// pflag takes a backquoted word in a usage as the value's name.
	for _, line := range strings.Split(newFlags().FlagUsages(), "\n") {
		if strings.Contains(line, "--truth-out") && !strings.Contains(line, "--truth-out string") {
			t.Errorf("usage %q: want --truth-out string", line)
		}
		if strings.Contains(line, "`") {
			t.Errorf("usage %q has a backquote", line)
		}
	}
}

// TestStrayArgumentRefused: a mistyped subcommand is an error, not a run
// with the word ignored.
func TestStrayArgumentRefused(t *testing.T) {
	if _, err := loadConfig([]string{"verfy", "--devices", "3"}); err == nil || !strings.Contains(err.Error(), `"verfy"`) {
		t.Fatalf("got %v, want an error naming the argument", err)
	}
}

// TestAckQoSKey checks uplink.ack_qos from the scenario file, the
// environment and --mqtt-ack-qos, and that a value other than 0 or 1 is
// refused naming the key.
func TestAckQoSKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.yaml")
	writeFile(t, path, "uplink:\n  ack_qos: 0\n")
	qos := func(args ...string) *int {
		t.Helper()
		c, err := loadConfig(args)
		if err != nil {
			t.Fatal(err)
		}
		return c.scenario.Uplink.AckQoS
	}
	if q := qos(); q != nil {
		t.Errorf("no key: ack qos %d, want unset (the uplink's default)", *q)
	}
	if q := qos("--scenario", path); q == nil || *q != 0 {
		t.Errorf("scenario file uplink.ack_qos 0: got %v", q)
	}
	if q := qos("--scenario", path, "--mqtt-ack-qos", "1"); q == nil || *q != 1 {
		t.Errorf("--mqtt-ack-qos 1 over the file's 0: got %v", q)
	}
	t.Setenv("FLEETSIM_UPLINK_ACK_QOS", "0")
	if q := qos(); q == nil || *q != 0 {
		t.Errorf("FLEETSIM_UPLINK_ACK_QOS=0: got %v", q)
	}
	c, err := loadConfig([]string{"--mqtt-ack-qos", "2"})
	if err != nil {
		t.Fatal(err)
	}
	c.scenario.EnsureDefaults()
	if err := c.scenario.Validate(); err == nil || !strings.Contains(err.Error(), "uplink.ack_qos") {
		t.Errorf("ack qos 2: %v, want an error naming uplink.ack_qos", err)
	}
}
