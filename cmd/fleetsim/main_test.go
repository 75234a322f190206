package main

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"edgeflow/hub"
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
	srv, err := hub.New(hub.Options{DataDir: t.TempDir(), HTTPAddr: "127.0.0.1:0", MQTTListen: addr,
		Logger: slog.New(slog.DiscardHandler), Registerer: prometheus.NewRegistry(), Gatherer: prometheus.NewRegistry()})
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
	for _, want := range []string{`"type":"progress"`, `"type":"report"`, `"type":"verify"`, `"ok":true`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %s:\n%s", want, out.String())
		}
	}
	out.Reset()
	if code := run([]string{"verify", "--truth", truth, "--hub", srv.HTTPAddr()}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "verify: OK") {
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
