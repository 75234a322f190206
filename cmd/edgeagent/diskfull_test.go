package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"edgeflow/internal/testbroker"
)

// mountTmpfs mounts a tmpfs of size on a new directory until the test
// ends, or skips the test when it cannot (not root).
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs (CI runs as root)")
	}
	dir := filepath.Join(t.TempDir(), "small")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs (%v: %s)", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// diskStatus is the part of the agent's /v1/status this test reads.
type diskStatus struct {
	Buffer struct {
		Depth uint64 `json:"depth"`
		Disk  struct {
			FreeBytes    int64 `json:"free_bytes"`
			ReserveBytes int64 `json:"reserve_bytes"`
			Limited      bool  `json:"limited"`
			Refused      int   `json:"refused_appends"`
		} `json:"disk"`
	} `json:"buffer"`
}

// TestDiskFullBinary fills the agent's buffer on a 20 MiB filesystem with
// no broker reachable: the agent must not die (Badger used to SIGBUS in a
// memtable flush), must answer 503 with Retry-After once the filesystem is
// short of space, must come up again after SIGKILL on the still-full
// filesystem, and once a hub is there must deliver every event it accepted
// and give the space back.
func TestDiskFullBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs binaries")
	}
	small := mountTmpfs(t, "20m")
	agentBin := buildBinary(t, "edgeflow/cmd/edgeagent", "amd64")
	hubBin := buildBinary(t, "edgeflow/cmd/hubd", "amd64")
	mqttAddr := fmt.Sprintf("127.0.0.1:%d", testbroker.FreePort(t))
	hubHTTP := fmt.Sprintf("127.0.0.1:%d", testbroker.FreePort(t))
	agentHTTP := fmt.Sprintf("127.0.0.1:%d", testbroker.FreePort(t))
	const device = "diskfull-1"
	argv := []string{agentBin, "--device-id", device, "--data-dir", filepath.Join(small, "agent"),
		"--listen", agentHTTP, "--udp-listen", "off", "--mqtt-url", "tcp://" + mqttAddr, "--ntp-servers", "",
		"--time-hub=false", "--buffer-full-policy", "reject", "--log-level", "info"}
	base := "http://" + agentHTTP
	start := func() *proc {
		p := startProc(t, argv)
		waitFor(t, time.Minute, "agent answers /healthz", func() (bool, string) {
			select {
			case err := <-p.done:
				p.done <- err
				t.Fatalf("agent exited (%v); log:\n%s", err, tail(p.logText()))
			default:
			}
			resp, err := http.Get(base + "/healthz")
			if err != nil {
				return false, err.Error()
			}
			resp.Body.Close()
			return resp.StatusCode == 200, resp.Status
		})
		return p
	}
	agent := start()

	accepted, full := 0, false
	for i := 0; i < 5000 && !full; i++ {
		var b strings.Builder
		for j := range 500 {
			// An incompressible tag, so the disk fills with ~100k events
			// rather than ~450k (every one is delivered at the end).
			n := uint64(i*500 + j)
			fmt.Fprintf(&b, "{\"metric\":\"fill\",\"value\":%d.%d,\"tags\":{\"req\":\"%d\",\"i\":\"%d\",\"pad\":\"%016x%016x\"}}\n",
				i*500+j, j*7919%1000, i, j, n*0x9E3779B97F4A7C15, (n+1)*0xBF58476D1CE4E5B9)
		}
		resp, err := http.Post(base+"/v1/events", "application/x-ndjson", strings.NewReader(b.String()))
		if err != nil {
			t.Fatalf("POST %d after %d accepted events: %v; agent log:\n%s", i, accepted, err, tail(agent.logText()))
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case 200:
			var res struct{ Accepted int }
			if err := json.Unmarshal(body, &res); err != nil {
				t.Fatal(err)
			}
			accepted += res.Accepted
		case 503:
			if resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), "short of space") {
				t.Fatalf("503 without Retry-After or reason: %v %s", resp.Header, body)
			}
			full = true
		default:
			t.Fatalf("POST: %s %s", resp.Status, body)
		}
	}
	if !full {
		t.Fatalf("no 503 after %d accepted events", accepted)
	}
	var st diskStatus
	if err := getJSON(base+"/v1/status", &st); err != nil || st.Buffer.Disk.Refused == 0 || st.Buffer.Depth != uint64(accepted) {
		t.Fatalf("status when full: %+v %v", st, err)
	}
	t.Logf("accepted %d events before the 503; free %d of reserve %d", accepted, st.Buffer.Disk.FreeBytes, st.Buffer.Disk.ReserveBytes)
	if !strings.Contains(agent.logText(), "disk space low") {
		t.Fatalf("no log line as the disk limit started:\n%s", tail(agent.logText()))
	}
	// Let Badger's background flushes and compactions run on the short disk.
	time.Sleep(3 * time.Second)
	if err := getJSON(base+"/v1/status", &st); err != nil {
		t.Fatalf("agent gone after filling the disk: %v; log:\n%s", err, tail(agent.logText()))
	}

	agent.cmd.Process.Signal(syscall.SIGKILL)
	<-agent.done
	agent.done <- nil
	agent = start()
	if err := getJSON(base+"/v1/status", &st); err != nil || st.Buffer.Depth != uint64(accepted) {
		t.Fatalf("status after the restart on the full disk: %+v %v", st, err)
	}

	hub := startProc(t, []string{hubBin, "--data-dir", filepath.Join(t.TempDir(), "hub"), "--http-addr", hubHTTP,
		"--mqtt-listen", mqttAddr, "--log-level", "warn"})
	var dv deviceView
	waitFor(t, 3*time.Minute, "hub has every accepted event", func() (bool, string) {
		if err := getJSON("http://"+hubHTTP+"/v1/devices/"+device, &dv); err != nil {
			return false, err.Error() + "; hub log: " + tail(hub.logText())
		}
		ok := len(dv.Streams) == 1 && dv.Streams[0].Events == uint64(accepted) && len(dv.Streams[0].Applied) == 1 &&
			dv.Streams[0].Applied[0] == [2]uint64{1, uint64(accepted)}
		return ok, fmt.Sprintf("%+v", dv)
	})
	waitFor(t, 2*time.Minute, "the agent frees the space of what the hub acknowledged", func() (bool, string) {
		err := getJSON(base+"/v1/status", &st)
		return err == nil && st.Buffer.Depth == 0 && !st.Buffer.Disk.Limited, fmt.Sprintf("%+v %v", st, err)
	})
	t.Logf("after delivery: free %d of reserve %d", st.Buffer.Disk.FreeBytes, st.Buffer.Disk.ReserveBytes)
	resp, err := http.Post(base+"/v1/events", "application/x-ndjson", strings.NewReader(`{"metric":"after","value":1}`))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("POST after space came back: %v %v", resp, err)
	}
	resp.Body.Close()
	for _, l := range []string{agent.logText()} {
		if strings.Contains(l, "SIGBUS") || strings.Contains(l, "fatal error") {
			t.Fatalf("agent crashed:\n%s", tail(l))
		}
	}
	agent.stop(time.Minute)
	hub.stop(30 * time.Second)
}

// tail is the end of a process log, for failure messages.
func tail(s string) string {
	if len(s) > 4000 {
		return "..." + s[len(s)-4000:]
	}
	return s
}
