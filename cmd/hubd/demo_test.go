package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"edgeflow/hub/hubapi"
)

// TestDemoStartsAndDevicesAppear runs `hubd --demo` (the README's first
// command) and waits for the simulated devices to show in GET /v1/devices
// and for the dashboard to be served, then stops it with SIGINT.
func TestDemoStartsAndDevicesAppear(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a 20-device fleet for several seconds")
	}
	httpAddr, mqttAddr := freeAddr(t), freeAddr(t)
	var stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"--demo", "--http-addr", httpAddr, "--mqtt-listen", mqttAddr, "--log-level", "warn"}, io.Discard, &stderr)
	}()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = syscall.Kill(os.Getpid(), syscall.SIGINT)
			<-done
		}
	})
	base := "http://" + httpAddr
	var devs hubapi.DevicesResponse
	deadline := time.Now().Add(60 * time.Second)
	for {
		devs = hubapi.DevicesResponse{}
		if resp, err := http.Get(base + "/v1/devices"); err == nil {
			_ = json.NewDecoder(resp.Body).Decode(&devs)
			resp.Body.Close()
		}
		applied := 0
		for _, d := range devs.Devices {
			for _, s := range d.Streams {
				if s.Events > 0 {
					applied++
					break
				}
			}
		}
		if applied >= 15 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 60s %d devices (%d with events applied), want 15 with events\n%s", len(devs.Devices), applied, stderr.String())
		}
		select {
		case code := <-done:
			stopped = true
			t.Fatalf("hubd --demo exited %d: %s", code, stderr.String())
		case <-time.After(200 * time.Millisecond):
		}
	}
	for _, d := range devs.Devices {
		if !strings.HasPrefix(d.ID, "demo-") {
			t.Errorf("device %q: want the demo's devices only", d.ID)
		}
	}
	resp, err := http.Get(base + "/")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("dashboard: %v %v", err, resp)
	}
	resp.Body.Close()
	stopped = true
	_ = syscall.Kill(os.Getpid(), syscall.SIGINT)
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr.String())
		}
	case <-time.After(45 * time.Second):
		t.Fatal("hubd --demo did not stop on SIGINT")
	}
}

// TestDemoDataDir checks that --demo uses a temporary data directory
// unless one is given.
func TestDemoDataDir(t *testing.T) {
	cfg, err := loadConfig([]string{"--demo"})
	if err != nil || !cfg.demo || cfg.hub.DataDir != "" {
		t.Fatalf("--demo: %v demo %v data-dir %q: want a temporary directory", err, cfg != nil && cfg.demo, cfg.hub.DataDir)
	}
	if cfg, err = loadConfig([]string{"--demo", "--data-dir", "x"}); err != nil || cfg.hub.DataDir != "x" {
		t.Fatalf("--demo --data-dir x: %v", err)
	}
	if cfg, err = loadConfig(nil); err != nil || cfg.hub.DataDir != "hubd-data" {
		t.Fatalf("without --demo: %v %q", err, cfg.hub.DataDir)
	}
	t.Setenv("HUBD_DATA_DIR", "y")
	if cfg, err = loadConfig([]string{"--demo"}); err != nil || cfg.hub.DataDir != "y" {
		t.Fatalf("--demo with HUBD_DATA_DIR=y: %v %q", err, cfg.hub.DataDir)
	}
}

// syncBuffer is a bytes.Buffer safe for the logger's and the test's
// goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
