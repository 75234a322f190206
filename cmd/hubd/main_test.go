package main

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"edgeflow/aggregate"
	"edgeflow/internal/testbroker"
)

func TestConfigPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "hubd.yaml")
	yaml := "data-dir: from-file\nhttp-addr: \":9001\"\ngroup: g1\ncheckpoint-interval: 2m\n"
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HUBD_HTTP_ADDR", ":9002")
	t.Setenv("HUBD_GROUP", "g2")
	cfg, err := loadConfig([]string{"--config", file, "--group", "g3"})
	if err != nil {
		t.Fatal(err)
	}
	o := cfg.hub
	if o.DataDir != "from-file" || o.HTTPAddr != ":9002" || o.Group != "g3" || o.CheckpointInterval != 2*time.Minute {
		t.Fatalf("got data-dir %q http-addr %q group %q checkpoint %v", o.DataDir, o.HTTPAddr, o.Group, o.CheckpointInterval)
	}
	if o.MQTTListen != ":1883" || o.RetentionMaxAge != 168*time.Hour || o.AcksAtLeastOnce {
		t.Fatalf("defaults: %q %v acks at least once %v", o.MQTTListen, o.RetentionMaxAge, o.AcksAtLeastOnce)
	}
	t.Setenv("HUBD_ACK_QOS", "1")
	if cfg, err = loadConfig(nil); err != nil || !cfg.hub.AcksAtLeastOnce {
		t.Fatalf("HUBD_ACK_QOS=1: %v, acks at least once %v", err, err == nil && cfg.hub.AcksAtLeastOnce)
	}
}

func TestBadConfigNamesKey(t *testing.T) {
	tests := []struct {
		args []string
		key  string
	}{
		{[]string{"--checkpoint-interval", "soon"}, "checkpoint-interval"},
		{[]string{"--log-level", "loud"}, "log-level"},
		{[]string{"--workers", "-3"}, "workers"},
		{[]string{"--mqtt-listen", "nowhere"}, "mqtt-listen"},
		{[]string{"--mqtt-url", "http://x"}, "mqtt-url"},
		{[]string{"--group", "g"}, "group"},
		{[]string{"--http-addr", "x:y"}, "http-addr"},
		{[]string{"--ack-qos", "2"}, "ack-qos"},
		{[]string{"--gomaxprocs", "-1"}, "gomaxprocs"},
		{[]string{"--gc-percent", "5"}, "gc-percent"},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			var stderr bytes.Buffer
			args := append([]string{"--data-dir", t.TempDir()}, tt.args...)
			if code := run(args, io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), `"`+tt.key+`"`) {
				t.Fatalf("exit %d, stderr %q: want 2 naming %q", code, stderr.String(), tt.key)
			}
		})
	}
}

func TestUnknownKeyInFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "hubd.yaml")
	_ = os.WriteFile(file, []byte("data_dir: x\n"), 0o600)
	if _, err := loadConfig([]string{"--config", file}); err == nil || !strings.Contains(err.Error(), `"data_dir"`) {
		t.Fatalf("got %v", err)
	}
}

func TestExampleConfigLoads(t *testing.T) {
	if _, err := loadConfig([]string{"--config", "../../configs/hubd.yaml"}); err != nil {
		t.Fatal(err)
	}
}

// TestRunServesAndStops runs hubd with the embedded broker, checks
// /healthz and /readyz, and stops it with SIGINT.
func TestRunServesAndStops(t *testing.T) {
	httpAddr, mqttAddr := freeAddr(t), freeAddr(t)
	var stderr bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"--data-dir", t.TempDir(), "--http-addr", httpAddr, "--mqtt-listen", mqttAddr, "--log-level", "warn"}, io.Discard, &stderr)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + httpAddr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("hubd not ready: %v\n%s", err, stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if c, err := net.Dial("tcp", mqttAddr); err != nil {
		t.Fatalf("embedded broker: %v", err)
	} else {
		c.Close()
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGINT)
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("hubd did not stop on SIGINT")
	}
}

// freeAddr is a loopback address whose port was free a moment ago.
func freeAddr(t *testing.T) string {
	return fmt.Sprintf("127.0.0.1:%d", testbroker.FreePort(t))
}

func TestBadAggregateConfigNamesKey(t *testing.T) {
	tests := []struct {
		yaml, env, key string
	}{
		{"aggregate:\n  resolution: soon\n", "", "aggregate.resolution"},
		{"aggregate:\n  resolution: 7ms\n  windows:\n    - {name: w, kind: tumbling, size: 1m}\n", "", "aggregate.windows[0]"},
		{"aggregate:\n  windows:\n    - {name: w, kind: weekly, size: 1m}\n", "", "aggregate.windows[0].kind"},
		{"aggregate:\n  windows:\n    - {name: w, kind: tumbling, sise: 1m}\n", "", "aggregate.windows[0].sise"},
		{"aggregate:\n  colour: red\n", "", "aggregate.colour"},
		{"", "-1", "aggregate.max_series"},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "hubd.yaml")
			_ = os.WriteFile(file, []byte(tt.yaml), 0o600)
			if tt.env != "" {
				t.Setenv("HUBD_AGGREGATE_MAX_SERIES", tt.env)
			}
			var stderr bytes.Buffer
			if code := run([]string{"--config", file, "--data-dir", t.TempDir(), "--http-addr", "off"}, io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), `"`+tt.key) {
				t.Fatalf("exit %d, stderr %q: want 2 naming %q", code, stderr.String(), tt.key)
			}
		})
	}
}

func TestAggregateConfig(t *testing.T) {
	cfg, err := loadConfig([]string{"--config", "../../configs/hubd.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	a := cfg.hub.Aggregate
	if a == nil || a.Resolution != 10*time.Second {
		t.Fatalf("aggregate config: %+v", a)
	}
	// The example shows one window of every kind, and each is valid.
	want := []aggregate.WindowConfig{
		{Name: "1m", Kind: "tumbling", Size: time.Minute},
		{Name: "5m-by-1m", Kind: "hopping", Size: 5 * time.Minute, Slide: time.Minute},
		{Name: "last-5m", Kind: "sliding", Size: 5 * time.Minute},
		{Name: "sessions-2m", Kind: "session", Gap: 2 * time.Minute},
	}
	if !slices.Equal(a.Windows, want) {
		t.Fatalf("windows %+v, want %+v", a.Windows, want)
	}
	opt := *a
	opt.EnsureDefaults()
	if err := opt.Validate(); err != nil {
		t.Fatalf("example aggregate config: %v", err)
	}
	t.Setenv("HUBD_AGGREGATE_ENABLED", "false")
	if cfg, err = loadConfig(nil); err != nil || cfg.hub.Aggregate != nil {
		t.Fatalf("disabled: %v %+v", err, cfg.hub.Aggregate)
	}
}

// TestStrayArgumentRefused: a mistyped subcommand is an error, not a hub
// started with the word ignored.
func TestStrayArgumentRefused(t *testing.T) {
	var out, errb strings.Builder
	if code := run([]string{"rebuidl", "--data-dir", t.TempDir()}, &out, &errb); code != 2 || !strings.Contains(errb.String(), `"rebuidl"`) {
		t.Fatalf("exit %d, stderr %q: want 2 naming the argument", code, errb.String())
	}
}
