package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"edgeflow/internal/testbroker"
)

// binDir holds the binaries the process tests build, once per run.
var (
	binDir   string
	binMu    sync.Mutex
	binBuilt = map[string]string{}
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "edgeagent-test-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// buildBinary builds pkg for goarch (static, as scripts/cross.sh does).
func buildBinary(t *testing.T, pkg, goarch string) string {
	t.Helper()
	binMu.Lock()
	defer binMu.Unlock()
	key := pkg + "-" + goarch
	if p, ok := binBuilt[key]; ok {
		return p
	}
	out := filepath.Join(binDir, filepath.Base(pkg)+"-"+goarch)
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-X main.version=test", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+goarch, "GOARM=7")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s for %s: %v\n%s", pkg, goarch, err, b)
	}
	binBuilt[key] = out
	return out
}

// proc is a process a test starts, signals and waits for.
type proc struct {
	t    *testing.T
	cmd  *exec.Cmd
	log  *bytes.Buffer
	done chan error
}

func startProc(t *testing.T, argv []string) *proc {
	t.Helper()
	p := &proc{t: t, cmd: exec.Command(argv[0], argv[1:]...), log: new(bytes.Buffer), done: make(chan error, 1)}
	p.cmd.Stdout, p.cmd.Stderr = &syncWriter{w: p.log}, &syncWriter{w: p.log}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// stop sends SIGTERM and waits; it fails the test unless the exit is clean.
func (p *proc) stop(within time.Duration) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		p.t.Fatal(err)
	}
	select {
	case err := <-p.done:
		if err != nil {
			p.t.Fatalf("%s exited with %v after SIGTERM; log:\n%s", p.cmd.Path, err, p.logText())
		}
	case <-time.After(within):
		p.t.Fatalf("%s still running %v after SIGTERM; log:\n%s", p.cmd.Path, within, p.logText())
	}
}

func (p *proc) logText() string {
	sw := p.cmd.Stderr.(*syncWriter)
	sw.mu.Lock()
	defer sw.mu.Unlock()
	return p.log.String()
}

type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}

// waitFor polls cond until it holds or within passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; last state: %s", what, within, state)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func getJSON(url string, v any) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// agentStatus is the part of GET /v1/status the tests read.
type agentStatus struct {
	StreamID string `json:"stream_id"`
	Buffer   struct {
		Depth   uint64 `json:"depth"`
		NextSeq uint64 `json:"next_seq"`
	} `json:"buffer"`
	Link struct {
		State string `json:"state"`
	} `json:"link"`
}

// deviceView is the part of the hub's GET /v1/devices/{id} the tests read.
type deviceView struct {
	Status  string `json:"status"`
	Streams []struct {
		StreamID string      `json:"stream_id"`
		Applied  [][2]uint64 `json:"applied"`
		Events   uint64      `json:"events"`
	} `json:"streams"`
}

// postEvents posts n events as NDJSON in requests of 100 and checks the
// sequence ranges continue from firstSeq.
func postEvents(t *testing.T, base string, n int, firstSeq uint64) {
	t.Helper()
	for sent := 0; sent < n; sent += 100 {
		var b strings.Builder
		for i := range 100 {
			fmt.Fprintf(&b, "{\"metric\":\"smoke\",\"value\":%d,\"tags\":{\"i\":\"%d\"}}\n", sent+i, sent+i)
		}
		resp, err := http.Post(base+"/v1/events", "application/x-ndjson", strings.NewReader(b.String()))
		if err != nil {
			t.Fatal(err)
		}
		var res struct {
			FirstSeq uint64 `json:"first_seq"`
			LastSeq  uint64 `json:"last_seq"`
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || json.Unmarshal(body, &res) != nil {
			t.Fatalf("POST: %s %s", resp.Status, body)
		}
		if want := firstSeq + uint64(sent); res.FirstSeq != want || res.LastSeq != want+99 {
			t.Fatalf("POST got range [%d, %d], want [%d, %d]", res.FirstSeq, res.LastSeq, want, want+99)
		}
	}
}

// smokeScenario runs the agent binary (through runner, e.g. qemu-arm-static,
// when not empty) against a hubd on loopback: events are taken while the hub
// is down, the agent is stopped with SIGTERM and restarted (the sequence
// resumes), the hub comes up and receives every event exactly once, and a
// last SIGTERM ends the agent cleanly with the hub seeing it offline.
func smokeScenario(t *testing.T, runner []string, agentBin string, slow time.Duration) {
	hubBin := buildBinary(t, "edgeflow/cmd/hubd", "amd64")
	dir := t.TempDir()
	mqttAddr := fmt.Sprintf("127.0.0.1:%d", testbroker.FreePort(t))
	hubHTTP := fmt.Sprintf("127.0.0.1:%d", testbroker.FreePort(t))
	agentHTTP := fmt.Sprintf("127.0.0.1:%d", testbroker.FreePort(t))
	const device = "smoke-1"
	agentArgv := append(append([]string{}, runner...), agentBin, "--device-id", device, "--data-dir", filepath.Join(dir, "agent"),
		"--listen", agentHTTP, "--udp-listen", "off", "--mqtt-url", "tcp://"+mqttAddr, "--ntp-servers", "",
		"--log-level", "warn", "--drain-timeout", "10s")
	base := "http://" + agentHTTP
	startAgent := func() *proc {
		p := startProc(t, agentArgv)
		waitFor(t, slow, "agent answers /healthz", func() (bool, string) {
			resp, err := http.Get(base + "/healthz")
			if err != nil {
				return false, err.Error() + "; log: " + p.logText()
			}
			resp.Body.Close()
			return resp.StatusCode == 200, resp.Status
		})
		return p
	}

	agent := startAgent()
	postEvents(t, base, 1000, 1)
	var st agentStatus
	if err := getJSON(base+"/v1/status", &st); err != nil || st.Buffer.Depth != 1000 || st.Link.State == "connected" {
		t.Fatalf("status with the hub down: %+v %v", st, err)
	}
	agent.stop(slow)

	agent = startAgent()
	postEvents(t, base, 500, 1001)
	hub := startProc(t, []string{hubBin, "--data-dir", filepath.Join(dir, "hub"), "--http-addr", hubHTTP,
		"--mqtt-listen", mqttAddr, "--log-level", "warn"})
	var dv deviceView
	waitFor(t, 2*slow, "hub has all 1500 events", func() (bool, string) {
		if err := getJSON("http://"+hubHTTP+"/v1/devices/"+device, &dv); err != nil {
			return false, err.Error() + "; hub log: " + hub.logText()
		}
		ok := len(dv.Streams) == 1 && dv.Streams[0].Events == 1500 && len(dv.Streams[0].Applied) == 1 &&
			dv.Streams[0].Applied[0] == [2]uint64{1, 1500}
		return ok, fmt.Sprintf("%+v", dv)
	})
	waitFor(t, slow, "the agent has the hub's acks for all events", func() (bool, string) {
		err := getJSON(base+"/v1/status", &st)
		return err == nil && st.Buffer.Depth == 0, fmt.Sprintf("%+v %v", st, err)
	})
	if st.StreamID != dv.Streams[0].StreamID {
		t.Fatalf("agent stream %s, hub stream %s", st.StreamID, dv.Streams[0].StreamID)
	}
	agent.stop(slow)
	waitFor(t, 10*time.Second, "hub sees the agent offline", func() (bool, string) {
		err := getJSON("http://"+hubHTTP+"/v1/devices/"+device, &dv)
		return err == nil && dv.Status == "offline", fmt.Sprintf("%+v %v", dv, err)
	})
	if log := agent.logText(); strings.Contains(log, "level=ERROR") {
		t.Errorf("agent logged errors:\n%s", log)
	}
	hub.stop(30 * time.Second)
}

// TestBinarySmoke is the scenario with the native binary: SIGTERM graceful
// shutdown, restart resume, and delivery to hubd end to end.
func TestBinarySmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs binaries")
	}
	smokeScenario(t, nil, buildBinary(t, "edgeflow/cmd/edgeagent", "amd64"), 60*time.Second)
}

func TestRunBadConfigExitCode(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"--device-id", "d", "--durability", "maybe"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), `config key "durability"`) {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
	errb.Reset()
	if code := run([]string{"--version"}, &out, &errb); code != 0 || !strings.HasPrefix(out.String(), "edgeagent ") {
		t.Fatalf("--version: exit %d, out %q, err %q", code, out.String(), errb.String())
	}
}
