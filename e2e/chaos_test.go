//go:build chaos

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"edgeflow/internal/testbroker"
)

// TestChaos is the reliability suite (scripts/chaos.sh; `go test -tags
// chaos ./e2e -run TestChaos -v`). Four agents send through a TCP proxy
// and a real Mosquitto to a hubd whose data directory is a small tmpfs
// (when the machine lets the test mount one), while the test kills hubd
// with SIGKILL at least 20 times, kills agents, restarts the broker, cuts
// and stalls the agent-broker link mid-batch, fills the hub's disk, makes
// one agent's buffer hit its bound while the hub is away and steps
// another agent's device clock. Then, per agent: every sequence number is
// applied or in a gap the agent reported, none is lost, and the engine
// counted each applied event once.
func TestChaos(t *testing.T) {
	const count = 30000
	mosq := testbroker.StartMosquitto(t, testbroker.MosquittoOptions{Persistence: true})
	proxy := newChaosProxy(t, mosq.Addr())
	dataDir, diskCapped := hubDisk(t)
	hub := startHub(t, dataDir, mosq.URL())
	// Agents stamp event seq at t0 + seq*2ms (+1h while the clock agent's
	// clock is stepped): at most the 500 events/s they append, so never
	// ahead of the wall clock, and the ground truth of every window.
	timing := fmt.Sprintf(",t0=%d,spacing=%d", time.Now().UnixNano(), 2*time.Millisecond)
	agents := []struct{ name, extras string }{
		{"chaos-plain-0", "pause=100ms" + timing},
		{"chaos-plain-1", "pause=100ms" + timing},
		{"chaos-bounded", "pause=100ms,maxbytes=131072" + timing},
		{"chaos-clock", "pause=100ms,clockstep=2500" + timing},
	}
	var procs []*agentProc
	var devs []chaosDevice
	for _, a := range agents {
		procs = append(procs, startAgentWith(t, filepath.Join(t.TempDir(), a.name), a.name, count, "tcp://"+proxy.addr(), a.extras))
		devs = append(devs, chaosDevice{device: a.name, count: count, ex: parseAgentExtras([]string{"", "", "", "", a.extras})})
	}
	faults := map[string]int{}
	rng := rand.New(rand.NewPCG(8, 8))
	restartHub := func() {
		hub.kill()
		hub.start()
	}
	start := time.Now()
	for round := 0; round < 24; round++ {
		time.Sleep(time.Duration(400+rng.IntN(600)) * time.Millisecond)
		restartHub()
		faults["hubd SIGKILL"]++
		switch round % 6 {
		case 1:
			procs[rng.IntN(len(procs))].crash()
			faults["agent SIGKILL"]++
		case 2:
			proxy.cut()
			faults["link cut mid-batch"]++
		case 3:
			proxy.stall(2 * time.Second)
			faults["link stalled 2s, then cut"]++
		case 4:
			if round == 4 || round == 16 {
				mosq.Restart()
				faults["broker restart"]++
			}
		case 5:
			// The hub is away for 6 s: the bounded agent's buffer fills
			// and drops its oldest events (reported as gaps).
			hub.kill()
			time.Sleep(6 * time.Second)
			hub.start()
			faults["hub away 6s (agent buffer bound)"]++
		}
		if round == 9 && diskCapped {
			fillDisk(t, hub, dataDir)
			faults["hub disk full"]++
		}
	}
	faults["device clock steps (+1h/-1h)"] = count / 2500
	chaosTook := time.Since(start)
	for _, a := range procs {
		if err := a.wait(3 * time.Minute); err != nil {
			t.Fatalf("agent %s: %v", a.device, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var rows []chaosRow
	bad := false
	for _, a := range procs {
		r := hub.chaosRow(ctx, t, a.device, count)
		rows = append(rows, r)
		if r.lost != 0 || r.duplicates != 0 || r.streams != 1 {
			bad = true
		}
	}
	verdict := verifyChaosWindows(ctx, t, hub, devs)
	for i := range rows {
		c := verdict.perDevice[rows[i].device]
		rows[i].windows, rows[i].mismatching = c[0], c[1]
	}
	table := chaosTable(faults, rows, chaosTook, verdict)
	t.Log("\n" + table)
	fmt.Println(table)
	if bad {
		for i, r := range rows {
			if r.lost == 0 && r.duplicates == 0 {
				continue
			}
			t.Logf("%s: missing %v; hub applied %v, gaps %v", r.device, r.missing, r.appliedRanges, r.gaps)
			t.Logf("%s agent.log (warnings, last 60 lines):\n%s", r.device, tailFile(filepath.Join(procs[i].dir, "agent.log"), 60))
		}
		t.Logf("hubd log (last 60 lines):\n%s", tailFile(hub.log.Name(), 60))
		t.Fatal("events lost or counted twice (table above)")
	}
	if verdict.mismatching != 0 || verdict.simMismatch != 0 || verdict.windows == 0 {
		t.Fatalf("windows differ from the ground truth (table above): %s", strings.Join(verdict.examples, "; "))
	}
	if rows[2].dropped == 0 {
		t.Error("the bounded agent dropped nothing: the buffer bound was not exercised")
	}
}

// chaosRow is one agent's result.
type chaosRow struct {
	device                                              string
	streams                                             int
	sent, applied, dropped, lost, duplicates, engineCnt uint64
	// On a loss: the ranges neither applied nor reported, and what the
	// hub holds (for the failure's diagnosis).
	missing, appliedRanges, gaps [][2]uint64
	// windows compared with the ground truth, and those that differ.
	windows, mismatching int
}

// chaosRow reads what the hub holds for device: applied ranges, gaps and
// the engine's count of its events.
func (h *hubProc) chaosRow(ctx context.Context, t testing.TB, device string, count uint64) chaosRow {
	r := chaosRow{device: device, sent: count}
	var v struct {
		Streams []struct {
			Applied   [][2]uint64 `json:"applied"`
			Events    uint64      `json:"events"`
			Gaps      [][2]uint64 `json:"gaps"`
			GapEvents uint64      `json:"gap_events"`
		} `json:"streams"`
	}
	if err := h.getJSON(ctx, "/v1/devices/"+device, &v); err != nil {
		t.Fatal(err)
	}
	r.streams = len(v.Streams)
	if len(v.Streams) == 0 {
		r.lost = count
		return r
	}
	s := v.Streams[0]
	r.applied = s.Events
	// A reported gap may cover events the hub applied anyway (sent, then
	// dropped from the agent's buffer before their ack came): count only
	// the sequence numbers the hub has not applied.
	for seq := uint64(1); seq <= count; seq++ {
		switch {
		case inRanges(s.Applied, seq):
		case inRanges(s.Gaps, seq):
			r.dropped++
		default:
			r.lost++
			if n := len(r.missing); n > 0 && r.missing[n-1][1] == seq-1 {
				r.missing[n-1][1] = seq
			} else {
				r.missing = append(r.missing, [2]uint64{seq, seq})
			}
		}
	}
	r.appliedRanges, r.gaps = s.Applied, s.Gaps
	// The engine counts every event it is given: more than applied means
	// an event was applied twice.
	r.engineCnt = h.engineCount(ctx, t, device)
	if r.engineCnt > r.applied {
		r.duplicates = r.engineCnt - r.applied
	}
	return r
}

// engineCount sums the engine's count of device's events over all time.
func (h *hubProc) engineCount(ctx context.Context, t testing.TB, device string) uint64 {
	now := time.Now()
	q := url.Values{"metric": {"e2e.value"}, "window": {"tumbling:1h"}, "group_by": {"device"}, "aggs": {"count"},
		"from": {now.Add(-6 * time.Hour).UTC().Format(time.RFC3339)}, "to": {now.Add(3 * time.Hour).UTC().Format(time.RFC3339)}}
	var v struct {
		Windows []struct {
			Group map[string]string `json:"group"`
			Count uint64            `json:"count"`
		} `json:"windows"`
	}
	if err := h.getJSON(ctx, "/v1/aggregates?"+q.Encode(), &v); err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, w := range v.Windows {
		if w.Group["device"] == device {
			n += w.Count
		}
	}
	return n
}

func (h *hubProc) getJSON(ctx context.Context, path string, dst any) error {
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+h.httpAddr+path, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("GET %s: %s %s", path, resp.Status, b)
	}
	return json.NewDecoder(resp.Body).Decode(dst)
}

// chaosTable renders the result as Markdown.
func chaosTable(faults map[string]int, rows []chaosRow, took time.Duration, v chaosVerdict) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| fault | injected |\n|---|---|\n")
	for _, k := range []string{"hubd SIGKILL", "agent SIGKILL", "broker restart", "link cut mid-batch", "link stalled 2s, then cut",
		"hub away 6s (agent buffer bound)", "hub disk full", "device clock steps (+1h/-1h)"} {
		fmt.Fprintf(&b, "| %s | %d |\n", k, faults[k])
	}
	fmt.Fprintf(&b, "\nchaos phase %v\n\n| agent | events sent | applied | dropped and reported | lost | duplicates | engine count | windows compared | mismatching windows |\n|---|---|---|---|---|---|---|---|---|\n", took.Round(time.Second))
	var tot chaosRow
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %d | %d | %d |\n", r.device, r.sent, r.applied, r.dropped, r.lost, r.duplicates, r.engineCnt, r.windows, r.mismatching)
		tot.sent, tot.applied, tot.dropped, tot.lost, tot.duplicates, tot.engineCnt = tot.sent+r.sent, tot.applied+r.applied,
			tot.dropped+r.dropped, tot.lost+r.lost, tot.duplicates+r.duplicates, tot.engineCnt+r.engineCnt
		tot.windows, tot.mismatching = tot.windows+r.windows, tot.mismatching+r.mismatching
	}
	fmt.Fprintf(&b, "| total | %d | %d | %d | %d | %d | %d | %d | %d |\n", tot.sent, tot.applied, tot.dropped, tot.lost, tot.duplicates, tot.engineCnt, tot.windows, tot.mismatching)
	fmt.Fprintf(&b, "\nwindows %s of e2e.value by device, compared on count, sum, min, max, last and p50/p95/p99 (within %g relative); simulator.Verify on the same ground truth (count, sum, min, max): %d match, %d differ\n",
		strings.Join(chaosWindowSpecs, ", "), chaosSketchAccuracy, v.simMatch, v.simMismatch)
	return b.String()
}

// hubDisk returns the hub's data directory: on a 256 MiB tmpfs when the
// test may mount one (root), so the disk can fill up; capped says so.
func hubDisk(t *testing.T) (dir string, capped bool) {
	dir = filepath.Join(t.TempDir(), "hub")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Logf("no tmpfs for the hub (%v: %s): the disk-full fault is skipped", err, strings.TrimSpace(string(out)))
		return dir, false
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
	return dir, true
}

// fillDisk fills the hub's filesystem for 3 s while agents send, frees it
// and makes sure hubd runs again (a full disk may have stopped it).
func fillDisk(t *testing.T, h *hubProc, dir string) {
	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Logf("fill: %v", err)
			}
			break
		}
	}
	f.Close()
	time.Sleep(3 * time.Second)
	_ = os.Remove(filler)
	h.kill() // whether it stopped on the full disk or not
	h.start()
}

// chaosProxy forwards TCP connections to a target and can cut or stall
// every connection it carries.
type chaosProxy struct {
	t      testing.TB
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	paused atomic.Bool
}

func newChaosProxy(t testing.TB, target string) *chaosProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &chaosProxy{t: t, ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	go p.accept()
	t.Cleanup(func() { ln.Close(); p.cut() })
	return p
}

func (p *chaosProxy) addr() string { return p.ln.Addr().String() }

func (p *chaosProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.DialTimeout("tcp", p.target, 2*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.mu.Unlock()
		go p.pipe(c, up)
		go p.pipe(up, c)
	}
}

// pipe copies src to dst in small chunks, so a cut lands mid-packet, and
// holds while the proxy is stalled.
func (p *chaosProxy) pipe(dst, src net.Conn) {
	defer func() { dst.Close(); src.Close() }()
	buf := make([]byte, 1024)
	for {
		n, err := src.Read(buf)
		for p.paused.Load() {
			time.Sleep(10 * time.Millisecond)
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// cut closes every connection at once (new ones are accepted).
func (p *chaosProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

// stall stops forwarding for d, mid-stream, then cuts: a link that hangs
// and then drops, as cellular links do.
func (p *chaosProxy) stall(d time.Duration) {
	p.paused.Store(true)
	time.Sleep(d)
	p.cut()
	p.paused.Store(false)
}

// startAgentWith is startAgent with extras (see agentExtras).
func startAgentWith(t testing.TB, dir, device string, count int, broker, extras string) *agentProc {
	a := &agentProc{t: t, device: device, dir: dir, env: agentEnv + "=" + strings.Join([]string{dir, device, strconv.Itoa(count), broker, extras}, "|")}
	a.start()
	t.Cleanup(a.kill)
	return a
}

// tailFile returns the last n lines of a file, or why it cannot.
func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
