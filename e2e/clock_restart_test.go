package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"edgeflow/internal/testbroker"
	"edgeflow/internal/testproc"
)

// agentBinProc is an edgeagent process that the test kills with SIGKILL
// and starts again on the same data directory and port.
type agentBinProc struct {
	t      *testing.T
	args   []string
	http   string
	cmd    *exec.Cmd
	log    *os.File
	device string
}

func startAgentBin(t *testing.T, bin, device, dataDir, broker string) *agentBinProc {
	t.Helper()
	a := &agentBinProc{t: t, device: device, http: fmt.Sprintf("127.0.0.1:%d", testbroker.FreePort(t))}
	a.args = []string{bin, "--device-id", device, "--data-dir", dataDir, "--listen", a.http,
		"--udp-listen", "off", "--mqtt-url", broker, "--ntp-servers", "", "--time-hub=true", "--durability", "sync",
		"--batch-linger", "20ms", "--log-level", "info"}
	var err error
	if a.log, err = os.Create(filepath.Join(t.TempDir(), device+".log")); err != nil {
		t.Fatal(err)
	}
	a.start()
	t.Cleanup(a.kill)
	return a
}

func (a *agentBinProc) start() {
	a.cmd = exec.Command(a.args[0], a.args[1:]...)
	a.cmd.Stdout, a.cmd.Stderr = a.log, a.log
	if err := a.cmd.Start(); err != nil {
		a.t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get("http://" + a.http + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	b, _ := os.ReadFile(a.log.Name())
	a.t.Fatalf("edgeagent %s not healthy within 30s; log:\n%s", a.device, b)
}

func (a *agentBinProc) kill() {
	if a.cmd != nil && a.cmd.Process != nil {
		a.cmd.Process.Signal(syscall.SIGKILL)
		a.cmd.Wait()
	}
}

// post sends events with their own ts to the agent; every one must be
// accepted.
func (a *agentBinProc) post(ts []time.Time, firstValue int) {
	a.t.Helper()
	var b strings.Builder
	for i, t := range ts {
		fmt.Fprintf(&b, "{\"metric\":\"clk\",\"value\":%d,\"ts\":%q}\n", firstValue+i, t.UTC().Format(time.RFC3339Nano))
	}
	resp, err := http.Post("http://"+a.http+"/v1/events", "application/x-ndjson", strings.NewReader(b.String()))
	if err != nil {
		a.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		a.t.Fatalf("POST to %s: %s", a.device, resp.Status)
	}
}

// TestRightClocksStayExactAcrossRestarts runs hubd (time service on) and
// two edgeagents with NTP off, on one machine: their clocks are exactly
// right. Events are posted with their own ts on and around 10 s window
// boundaries: right after each start, right after each agent is killed
// with SIGKILL and restarted, while the hub is down (SIGKILL) and after it
// is back. Every event's corrected time must be within 5 ms of its device
// time, and every 10 s window's count per device exact: a right clock is
// not moved by a correction it cannot tell from zero, keeps its estimate
// across a restart, and waits briefly for its first exchange.
func TestRightClocksStayExactAcrossRestarts(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs binaries")
	}
	agentBin := testproc.Build(t, "edgeflow/cmd/edgeagent", "edgeagent")
	dir := t.TempDir()
	hub := startHub(t, filepath.Join(dir, "hub"), "")
	agents := []*agentBinProc{
		startAgentBin(t, agentBin, "clk-a", filepath.Join(dir, "a"), hub.brokerURL),
		startAgentBin(t, agentBin, "clk-b", filepath.Join(dir, "b"), hub.brokerURL),
	}
	// want[device][window start ms] counts the events by their true time.
	want := map[string]map[int64]uint64{}
	sent := map[string]int{}
	first := time.Now().Add(-time.Minute)
	round := func(a *agentBinProc) {
		// The latest boundary, and events on it and 1 µs..3 ms either side.
		b := time.Now().Truncate(10 * time.Second)
		var ts []time.Time
		for _, d := range []time.Duration{-3 * time.Millisecond, -time.Microsecond, 0, 0, time.Microsecond, 3 * time.Millisecond} {
			ts = append(ts, b.Add(d))
		}
		a.post(ts, sent[a.device])
		sent[a.device] += len(ts)
		if want[a.device] == nil {
			want[a.device] = map[int64]uint64{}
		}
		for _, x := range ts {
			want[a.device][x.Truncate(10*time.Second).UnixMilli()]++
		}
	}
	everyone := func() {
		for _, a := range agents {
			round(a)
		}
	}

	everyone() // fresh start: before the first time exchange
	time.Sleep(3 * time.Second)
	everyone()
	for _, a := range agents {
		time.Sleep(12 * time.Second) // past the state's write interval
		a.kill()
		a.start()
		round(a) // right after the restart
		everyone()
	}
	hub.kill()
	everyone() // buffered while the hub is down
	time.Sleep(2 * time.Second)
	hub.start()
	everyone()
	time.Sleep(3 * time.Second)
	everyone()

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var errs []float64 // |corrected - device time|, ms
	methods := map[string]int{}
	for _, a := range agents {
		evs := waitEvents(ctx, t, hub, a.device, first, sent[a.device])
		for _, e := range evs {
			et, err1 := time.Parse(time.RFC3339Nano, e.Time)
			dt, err2 := time.Parse(time.RFC3339Nano, e.DeviceTime)
			if err1 != nil || err2 != nil {
				t.Fatalf("event times %q %q: %v %v", e.Time, e.DeviceTime, err1, err2)
			}
			d := et.Sub(dt).Abs()
			errs = append(errs, float64(d)/1e6)
			methods[e.Method]++
			if d > 5*time.Millisecond {
				t.Errorf("%s seq %d (%s): corrected %s, device time %s: %v apart",
					a.device, e.Seq, e.Method, e.Time, e.DeviceTime, d)
			}
		}
	}
	slices.Sort(errs)
	q := func(p float64) float64 { return errs[min(len(errs)-1, int(math.Ceil(p*float64(len(errs))))-1)] }
	t.Logf("event-time error |corrected - device_time| over %d events: p50 %.3fms p99 %.3fms max %.3fms; methods %v",
		len(errs), q(0.5), q(0.99), errs[len(errs)-1], methods)

	// Every 10 s window of every device holds exactly its events.
	got := map[string]map[int64]uint64{}
	var v struct{ Windows []aggWindow }
	qs := url.Values{"metric": {"clk"}, "window": {"tumbling:10s"}, "group_by": {"device"}, "aggs": {"count"},
		"from": {first.Truncate(10 * time.Second).UTC().Format(time.RFC3339)},
		"to":   {time.Now().Add(time.Minute).UTC().Format(time.RFC3339)}}
	if err := json.Unmarshal(get(t, hub, "/v1/aggregates?"+qs.Encode()), &v); err != nil {
		t.Fatal(err)
	}
	for _, w := range v.Windows {
		d := w.Group["device"]
		if got[d] == nil {
			got[d] = map[int64]uint64{}
		}
		got[d][w.StartMs] += w.Count
	}
	for dev, ws := range want {
		for start, n := range ws {
			if got[dev][start] != n {
				t.Errorf("%s window %s: %d events, want %d", dev, time.UnixMilli(start).UTC().Format(time.RFC3339), got[dev][start], n)
			}
		}
		for start, n := range got[dev] {
			if ws[start] == 0 {
				t.Errorf("%s window %s: %d events, want none", dev, time.UnixMilli(start).UTC().Format(time.RFC3339), n)
			}
		}
	}
}

// eventRow is the part of an event of GET /v1/events this test reads.
type eventRow struct {
	Seq        uint64 `json:"seq"`
	Time       string `json:"time"`
	DeviceTime string `json:"device_time"`
	Method     string `json:"method"`
}

type eventsPage struct {
	Events    []eventRow `json:"events"`
	Truncated bool       `json:"truncated"`
}

// waitEvents polls GET /v1/events until device's n events are there.
func waitEvents(ctx context.Context, t *testing.T, h *hubProc, device string, from time.Time, n int) []eventRow {
	t.Helper()
	q := url.Values{"device": {device}, "from": {from.UTC().Format(time.RFC3339)},
		"to": {time.Now().Add(time.Minute).UTC().Format(time.RFC3339)}, "limit": {"10000"}}
	var p eventsPage
	for {
		p = eventsPage{}
		err := fetchJSON(ctx, "http://"+h.httpAddr+"/v1/events?"+q.Encode(), &p)
		if err == nil && len(p.Events) >= n {
			if len(p.Events) > n || p.Truncated {
				t.Fatalf("%s: %d events (truncated %v), want %d", device, len(p.Events), p.Truncated, n)
			}
			return p.Events
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %d of %d events reached the hub (last error %v)", device, len(p.Events), n, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func fetchJSON(ctx context.Context, u string, dst any) error {
	req, err := http.NewRequestWithContext(ctx, "GET", u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(dst)
}
