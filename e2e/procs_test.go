package e2e

import (
	"context"
	"edgeflow/internal/testbroker"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	buildOnce sync.Once
	hubdBin   string
	buildErr  error
)

// buildHubd builds cmd/hubd once per test binary run.
func buildHubd(t testing.TB) string {
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "edgeflow-e2e-bin")
		if err != nil {
			buildErr = err
			return
		}
		hubdBin = filepath.Join(dir, "hubd")
		out, err := exec.Command("go", "build", "-o", hubdBin, "edgeflow/cmd/hubd").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build hubd: %v: %s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return hubdBin
}

// hubProc is a hubd process that the test kills and restarts.
type hubProc struct {
	t        testing.TB
	bin      string
	args     []string
	httpAddr string
	// brokerURL is where agents connect: the external broker or hubd's own.
	brokerURL string
	cmd       *exec.Cmd
	log       *os.File
}

// startHub starts hubd on an external broker at mqttURL or, when mqttURL is
// empty, with its embedded broker on a free port (see brokerURL).
func startHub(t testing.TB, dataDir, mqttURL string) *hubProc {
	h := &hubProc{t: t, bin: buildHubd(t), httpAddr: fmt.Sprintf("127.0.0.1:%d", testbroker.FreePort(t))}
	h.args = []string{"--data-dir", dataDir, "--http-addr", h.httpAddr,
		"--checkpoint-interval", "2s", "--log-level", "warn"}
	if mqttURL != "" {
		h.args = append(h.args, "--mqtt-url", mqttURL, "--client-id", "e2e-hub-"+strconv.Itoa(os.Getpid()))
		h.brokerURL = mqttURL
	} else {
		listen := fmt.Sprintf("127.0.0.1:%d", testbroker.FreePort(t))
		h.args = append(h.args, "--mqtt-listen", listen)
		h.brokerURL = "tcp://" + listen
	}
	var err error
	if h.log, err = os.Create(filepath.Join(t.TempDir(), "hubd.log")); err != nil {
		t.Fatal(err)
	}
	h.start()
	t.Cleanup(h.kill)
	return h
}

// startHubWithConfig starts hubd with the YAML cfg (its own data
// directory, the embedded broker on a free port, checkpoints every second
// and ticks every 50 ms, so the test sees consumers move quickly).
func startHubWithConfig(t testing.TB, cfg string) *hubProc {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "hubd.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	h := &hubProc{t: t, bin: buildHubd(t), httpAddr: fmt.Sprintf("127.0.0.1:%d", testbroker.FreePort(t))}
	listen := fmt.Sprintf("127.0.0.1:%d", testbroker.FreePort(t))
	h.brokerURL = "tcp://" + listen
	h.args = []string{"--config", cfgPath, "--data-dir", filepath.Join(dir, "data"), "--http-addr", h.httpAddr,
		"--mqtt-listen", listen, "--checkpoint-interval", "1s", "--tick-interval", "50ms", "--log-level", "warn"}
	var err error
	if h.log, err = os.Create(filepath.Join(dir, "hubd.log")); err != nil {
		t.Fatal(err)
	}
	h.start()
	t.Cleanup(h.kill)
	return h
}

func (h *hubProc) start() {
	h.cmd = exec.Command(h.bin, h.args...)
	h.cmd.Stdout, h.cmd.Stderr = h.log, h.log
	if err := h.cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	h.waitReady(30 * time.Second)
}

func (h *hubProc) waitReady(within time.Duration) {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + h.httpAddr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	b, _ := os.ReadFile(h.log.Name())
	h.t.Fatalf("hubd not ready within %v; log:\n%s", within, b)
}

func (h *hubProc) kill() {
	if h.cmd != nil && h.cmd.Process != nil {
		h.cmd.Process.Signal(syscall.SIGKILL)
		h.cmd.Wait()
	}
}

// stream is the part of GET /v1/devices/{id} this test checks.
type deviceView struct {
	Streams []struct {
		StreamID string      `json:"stream_id"`
		Applied  [][2]uint64 `json:"applied"` // [[first, last], ...]
		Events   uint64      `json:"events"`
	} `json:"streams"`
}

func (h *hubProc) device(ctx context.Context, id string) (deviceView, error) {
	var v deviceView
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+h.httpAddr+"/v1/devices/"+id, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return v, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return v, fmt.Errorf("GET /v1/devices/%s: %s", id, resp.Status)
	}
	return v, json.NewDecoder(resp.Body).Decode(&v)
}
