package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"edgeflow/internal/testbroker"
	"edgeflow/internal/testnats"
	"edgeflow/internal/testproc"
)

// clusterWindow is the aggregate resolution the ground truth is kept at.
const clusterWindow = 10 * time.Second

// TestClusterProcessesExactlyOnce runs everything as real processes: three
// nats-server processes (JetStream R3, an MQTT listener each), one hubd
// binary in cluster mode and three edgeagent binaries, each connected to
// another server's MQTT listener first and the other two after it. Events
// are posted to the agents' HTTP APIs all along, while the stream's leader
// is killed with SIGKILL and restarted, and while hubd is killed with
// SIGKILL and restarted on an emptied data directory (so it rebuilds its
// state from the stream). Then every event an agent accepted is applied
// exactly once (each device's applied range is exactly 1..n and its event
// count n), /v1/devices lists every device, and every 10 s window of every
// device holds exactly the events posted with a time in it.
func TestClusterProcessesExactlyOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("runs nats-server, hubd and edgeagent processes")
	}
	c := testnats.Start(t, 3) // skips, saying how to install it, without nats-server 2.10+
	agentBin := testproc.Build(t, "edgeflow/cmd/edgeagent", "edgeagent")
	dir := t.TempDir()
	hubDir := filepath.Join(dir, "hub")
	hub := startClusterHub(t, hubDir, c.URLs())

	devices := []string{"nats-a", "nats-b", "nats-c"}
	// Load: each agent gets 50 events every 50 ms until stop.
	load := startClusterLoad(t, c, agentBin, dir, devices, 50*time.Millisecond, 50)
	agents, truth := load.agents, load.truth
	phase := func(what string, d time.Duration) {
		t.Logf("%s; load for %v", what, d)
		time.Sleep(d)
	}

	phase("all up", 3*time.Second)
	leader := streamLeader(t, c)
	c.Kill(leader)
	phase(fmt.Sprintf("NATS server %s (the stream's leader) killed", c.Nodes[leader].Name), 4*time.Second)
	c.Restart(leader)
	phase(fmt.Sprintf("NATS server %s restarted", c.Nodes[leader].Name), 3*time.Second)
	hub.kill()
	if err := os.RemoveAll(hubDir); err != nil {
		t.Fatal(err)
	}
	phase("hubd killed, its data directory deleted", 2*time.Second)
	hub.start()
	phase("hubd restarted on an empty data directory", 3*time.Second)
	load.stop()
	if t.Failed() {
		return
	}

	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	var total uint64
	for i, a := range agents {
		n := truth[i].posted
		total += n
		v := waitClusterApplied(ctx, t, hub, a.device, n)
		if len(v.Streams) != 1 {
			t.Fatalf("%s: %d streams, want 1: %+v", a.device, len(v.Streams), v.Streams)
		}
		s := v.Streams[0]
		if len(s.Applied) != 1 || s.Applied[0] != [2]uint64{1, n} || s.Events != n {
			t.Errorf("%s: applied %v, %d events; want [[1 %d]] and %d events", a.device, s.Applied, s.Events, n, n)
		}
	}
	t.Logf("%d events posted to 3 agents, every one applied once", total)

	var list struct {
		Devices []struct {
			ID string `json:"id"`
		} `json:"devices"`
	}
	if err := json.Unmarshal(get(t, hub, "/v1/devices"), &list); err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, d := range list.Devices {
		listed[d.ID] = true
	}
	for _, d := range devices {
		if !listed[d] {
			t.Errorf("GET /v1/devices lacks %s: %+v", d, list.Devices)
		}
	}

	windows := waitClusterWindows(ctx, t, hub, devices, truth)
	t.Logf("%d windows of 10 s equal the ground truth", windows)
}

// clusterHTTP posts to the agents; a stuck request fails the test.
var clusterHTTP = &http.Client{Timeout: 10 * time.Second}

// clusterLoad is one edgeagent process per device, each connected to
// another NATS server's MQTT listener first and the others after it, and
// a goroutine per agent posting events to it until stop.
type clusterLoad struct {
	agents []*agentBinProc
	truth  []clusterTruth // what each agent accepted; read after stop
	done   chan struct{}
	wg     sync.WaitGroup
}

// startClusterLoad starts the agents and posts n events to each every
// interval (times in the second before now, see clusterEventTimes).
func startClusterLoad(t *testing.T, c *testnats.Cluster, agentBin, dir string, devices []string, every time.Duration, n int) *clusterLoad {
	l := &clusterLoad{truth: make([]clusterTruth, len(devices)), done: make(chan struct{})}
	for i, d := range devices {
		var brokers []string
		for k := range c.Nodes {
			brokers = append(brokers, c.Nodes[(i+k)%len(c.Nodes)].MQTTURL())
		}
		l.agents = append(l.agents, startAgentBin(t, agentBin, d, filepath.Join(dir, d), strings.Join(brokers, ",")))
	}
	for i, a := range l.agents {
		l.truth[i].windows = map[int64]uint64{}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			tick := time.NewTicker(every)
			defer tick.Stop()
			for {
				select {
				case <-l.done:
					return
				case <-tick.C:
				}
				ts := clusterEventTimes(time.Now(), n)
				if err := postEvents(a, ts, int(l.truth[i].posted)); err != nil {
					t.Errorf("%s: %v", a.device, err)
					return
				}
				l.truth[i].add(ts)
			}
		}()
	}
	return l
}

// stop ends the posting and waits for it.
func (l *clusterLoad) stop() {
	close(l.done)
	l.wg.Wait()
}

// clusterTruth is what was posted to one agent: the count, and the count
// per window start (unix ms).
type clusterTruth struct {
	posted  uint64
	windows map[int64]uint64
}

func (c *clusterTruth) add(ts []time.Time) {
	c.posted += uint64(len(ts))
	for _, x := range ts {
		c.windows[x.Truncate(clusterWindow).UnixMilli()]++
	}
}

// clusterEventTimes returns n event times in the second before now, none
// within 200 ms of a window boundary, so that a clock correction of a few
// milliseconds cannot move an event to another window than the truth's.
func clusterEventTimes(now time.Time, n int) []time.Time {
	ts := make([]time.Time, n)
	for i := range ts {
		x := now.Add(-time.Second + time.Duration(i)*time.Second/time.Duration(n))
		if off := x.Sub(x.Truncate(clusterWindow)); off < 200*time.Millisecond {
			x = x.Add(200*time.Millisecond - off)
		} else if off > clusterWindow-200*time.Millisecond {
			x = x.Add(clusterWindow - 200*time.Millisecond - off)
		}
		ts[i] = x
	}
	return ts
}

// postEvents posts events with the given times to the agent, which must
// accept every one.
func postEvents(a *agentBinProc, ts []time.Time, firstValue int) error {
	var b strings.Builder
	for i, x := range ts {
		fmt.Fprintf(&b, "{\"metric\":\"load\",\"value\":%d,\"ts\":%q}\n", firstValue+i, x.UTC().Format(time.RFC3339Nano))
	}
	resp, err := clusterHTTP.Post("http://"+a.http+"/v1/events", "application/x-ndjson", strings.NewReader(b.String()))
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("POST /v1/events: %s", resp.Status)
	}
	return nil
}

// startClusterHub starts hubd in cluster mode on the NATS servers at
// urls (stream replicas 3, 8 partitions).
func startClusterHub(t *testing.T, dataDir, urls string) *hubProc {
	h := &hubProc{t: t, bin: buildHubd(t), httpAddr: fmt.Sprintf("127.0.0.1:%d", testbroker.FreePort(t))}
	h.args = []string{"--data-dir", dataDir, "--http-addr", h.httpAddr, "--nats-url", urls,
		"--nats-partitions", "8", "--checkpoint-interval", "2s", "--log-level", "warn"}
	var err error
	if h.log, err = os.Create(filepath.Join(t.TempDir(), "hubd.log")); err != nil {
		t.Fatal(err)
	}
	h.start()
	t.Cleanup(h.kill)
	return h
}

// streamLeader is the index of the node leading the hub's stream.
func streamLeader(t *testing.T, c *testnats.Cluster) int {
	t.Helper()
	nc, err := nats.Connect(c.URLs(), nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, "EDGEFLOW")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Cluster == nil || c.Index(info.Cluster.Leader) < 0 {
		t.Fatalf("stream EDGEFLOW: no known leader: %+v", info.Cluster)
	}
	return c.Index(info.Cluster.Leader)
}

// waitClusterApplied polls GET /v1/devices/{device} until the hub has applied n
// events of it (or more, which the caller reports), or ctx ends.
func waitClusterApplied(ctx context.Context, t *testing.T, h *hubProc, device string, n uint64) deviceView {
	t.Helper()
	var v deviceView
	var err error
	for {
		v, err = h.device(ctx, device)
		var got uint64
		for _, s := range v.Streams {
			got += s.Events
		}
		if err == nil && got >= n {
			return v
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %d of %d events applied (last error %v): %+v", device, got, n, err, v.Streams)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// waitClusterWindows polls the 10 s tumbling counts per device until they
// equal the truth, and returns how many windows it compared.
func waitClusterWindows(ctx context.Context, t *testing.T, h *hubProc, devices []string, truth []clusterTruth) int {
	t.Helper()
	from, to := int64(1<<62), int64(0)
	for _, tr := range truth {
		for w := range tr.windows {
			from, to = min(from, w), max(to, w+clusterWindow.Milliseconds())
		}
	}
	q := url.Values{"metric": {"load"}, "window": {"tumbling:10s"}, "group_by": {"device"}, "aggs": {"count"},
		"from": {fmt.Sprint(from)}, "to": {fmt.Sprint(to)}}
	var diff string
	for {
		var v struct{ Windows []aggWindow }
		if err := json.Unmarshal(get(t, h, "/v1/aggregates?"+q.Encode()), &v); err != nil {
			t.Fatal(err)
		}
		got := map[string]map[int64]uint64{}
		for _, w := range v.Windows {
			d := w.Group["device"]
			if got[d] == nil {
				got[d] = map[int64]uint64{}
			}
			got[d][w.StartMs] += w.Count
		}
		diff = ""
		n := 0
		for i, d := range devices {
			for start, want := range truth[i].windows {
				n++
				if got[d][start] != want && diff == "" {
					diff = fmt.Sprintf("%s window %d: %d events, want %d", d, start, got[d][start], want)
				}
			}
			for start, c := range got[d] {
				if truth[i].windows[start] == 0 && diff == "" {
					diff = fmt.Sprintf("%s window %d: %d events, want none", d, start, c)
				}
			}
		}
		if diff == "" {
			return n
		}
		select {
		case <-ctx.Done():
			t.Fatalf("windows differ from the ground truth: %s", diff)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
