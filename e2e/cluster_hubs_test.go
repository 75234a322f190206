package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"edgeflow/hub/hubapi"
	"edgeflow/internal/testbroker"
	"edgeflow/internal/testnats"
	"edgeflow/internal/testproc"
)

// clusterHubsTTL is the lease TTL of the multi-hub test: short, so a
// killed hub's partitions are taken over within seconds
// (E2E_CLUSTER_TTL sets another, e.g. hubd's default 4s for its figures).
var clusterHubsTTL = 2 * time.Second

// TestClusterHubsShareTheFleet runs three nats-server processes, three
// hubd processes sharing the stream's 8 partitions under leases, and six
// edgeagent processes posting events all along, while hubs are killed
// with SIGKILL and restarted (E2E_CLUSTER_KILLS times, 2 by default), one
// is paused with SIGSTOP past its lease and continued, a fourth joins and
// the first stops cleanly (E2E_CLUSTER_TTL sets the lease TTL, 2s by
// default). After each change every partition has one
// owner among the live hubs; at the end every event any agent accepted is
// applied exactly once, every 10 s window of every device equals the
// ground truth on every live hub, and every live hub answers
// /v1/aggregates byte for byte alike. GET /v1/events on every hub lists
// each device's events once, from every hub that applied them, naming
// hub-a while it is stopped (then restarted). It logs the takeover times.
func TestClusterHubsShareTheFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("runs nats-server, hubd and edgeagent processes")
	}
	kills := 2
	if v := os.Getenv("E2E_CLUSTER_KILLS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			t.Fatalf("E2E_CLUSTER_KILLS=%q: want a count", v)
		}
		kills = n
	}
	if v := os.Getenv("E2E_CLUSTER_TTL"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Second {
			t.Fatalf("E2E_CLUSTER_TTL=%q: want a duration of at least 1s", v)
		}
		clusterHubsTTL = d
	}
	c := testnats.Start(t, 3)
	agentBin := testproc.Build(t, "edgeflow/cmd/edgeagent", "edgeagent")
	dir := t.TempDir()
	hubs := map[string]*hubProc{}
	start := func(id string) *hubProc {
		h := startClusterHubID(t, filepath.Join(dir, id), c.URLs(), id)
		hubs[id] = h
		return h
	}
	for _, id := range []string{"hub-a", "hub-b", "hub-c"} {
		start(id)
	}
	live := func() []string {
		var ids []string
		for id, h := range hubs {
			if h.cmd != nil && h.cmd.ProcessState == nil {
				ids = append(ids, id)
			}
		}
		slices.Sort(ids)
		return ids
	}

	devices := []string{"dev-1", "dev-2", "dev-3", "dev-4", "dev-5", "dev-6"}
	load := startClusterLoad(t, c, agentBin, dir, devices, 100*time.Millisecond, 20)
	agents, truth := load.agents, load.truth

	// owned waits until every partition has an owner among the live hubs,
	// as the first live hub's GET /v1/cluster says, each live hub owning
	// at least one when want is set, and returns how long it took.
	owned := func(what string, balanced bool) time.Duration {
		t.Helper()
		began := time.Now()
		deadline := began.Add(30 * time.Second)
		var last string
		for time.Now().Before(deadline) {
			ids := live()
			st, err := clusterStatus(hubs[ids[0]])
			if err == nil {
				last = fmt.Sprint(st.Hubs)
				if ownedByLive(st, ids, balanced) {
					return time.Since(began)
				}
			} else {
				last = err.Error()
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("%s: partitions not owned by the live hubs %v within 30s; last view %s", what, live(), last)
		return 0
	}

	time.Sleep(2 * time.Second)
	t.Logf("three hubs balanced after %v", owned("start", true))

	var takeovers []time.Duration
	for k := range kills {
		id := []string{"hub-b", "hub-c"}[k%2]
		hubs[id].kill()
		d := owned(id+" killed", false)
		takeovers = append(takeovers, d)
		t.Logf("kill %d: %s SIGKILLed, its partitions owned again after %v", k+1, id, d)
		hubs[id].start()
		t.Logf("%s restarted, balanced after %v", id, owned(id+" restarted", true))
	}
	if len(takeovers) > 0 {
		s := slices.Clone(takeovers)
		slices.Sort(s)
		t.Logf("takeover after SIGKILL over %d kills (lease TTL %v): p50 %v, max %v", len(s), clusterHubsTTL, s[len(s)/2], s[len(s)-1])
	}

	paused := hubs["hub-c"]
	if err := paused.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * clusterHubsTTL)
	if err := paused.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	t.Logf("hub-c paused for %v and continued, balanced after %v", 2*clusterHubsTTL, owned("hub-c continued", true))

	start("hub-d")
	t.Logf("hub-d joined, balanced after %v", owned("hub-d joined", true))

	a := hubs["hub-a"]
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = a.cmd.Wait()
	t.Logf("hub-a stopped cleanly, its partitions owned again after %v", owned("hub-a stopped", true))

	time.Sleep(time.Second)
	load.stop()
	if t.Failed() {
		return
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var total uint64
	for _, id := range live() {
		h := hubs[id]
		for i, a := range agents {
			n := truth[i].posted
			v := waitClusterApplied(ctx, t, h, a.device, n)
			if len(v.Streams) != 1 {
				t.Fatalf("%s via %s: %d streams, want 1: %+v", a.device, id, len(v.Streams), v.Streams)
			}
			s := v.Streams[0]
			if len(s.Applied) != 1 || s.Applied[0] != [2]uint64{1, n} || s.Events != n {
				t.Errorf("%s via %s: applied %v, %d events; want [[1 %d]] and %d events", a.device, id, s.Applied, s.Events, n, n)
			}
		}
		windows := waitClusterWindows(ctx, t, h, devices, truth)
		t.Logf("%s: every event applied once, %d windows of 10 s equal the ground truth", id, windows)
	}
	for i := range truth {
		total += truth[i].posted
	}
	t.Logf("%d events posted to %d agents", total, len(agents))

	// Every live hub gives the same answer, byte for byte.
	from, to := int64(1<<62), int64(0)
	for _, tr := range truth {
		for w := range tr.windows {
			from, to = min(from, w), max(to, w+clusterWindow.Milliseconds())
		}
	}
	q := url.Values{"metric": {"load"}, "window": {"tumbling:10s"}, "group_by": {"device"},
		"from": {fmt.Sprint(from)}, "to": {fmt.Sprint(to)}}
	var first []byte
	for _, id := range live() {
		b := get(t, hubs[id], "/v1/aggregates?"+q.Encode())
		if first == nil {
			first = b
		} else if !bytes.Equal(first, b) {
			t.Errorf("%s answers /v1/aggregates differently from %s:\n%s\n%s", id, live()[0], b, first)
		}
	}

	// GET /v1/events on any hub: every event of a device once, from the
	// logs of every hub that applied its partition; with hub-a stopped,
	// the devices whose partition it held say so (missing_hubs) until it
	// is back.
	named := 0
	for _, id := range live() {
		for i, a := range agents {
			n, missing := listClusterEvents(t, hubs[id], a.device, from, to)
			switch {
			case slices.Contains(missing, "hub-a") && n <= truth[i].posted:
				named++
			case n != truth[i].posted || len(missing) > 0:
				t.Errorf("%s with hub-a stopped lists %d events of %s, %d posted; missing_hubs %v", id, n, a.device, truth[i].posted, missing)
			}
		}
	}
	t.Logf("with hub-a stopped, %d of %d device listings name it missing; the others are complete", named, len(live())*len(agents))
	hubs["hub-a"].start()
	t.Logf("hub-a restarted, balanced after %v", owned("hub-a restarted", true))
	for _, id := range live() {
		for i, a := range agents {
			if n, missing := listClusterEvents(t, hubs[id], a.device, from, to); n != truth[i].posted || len(missing) > 0 {
				t.Errorf("%s lists %d events of %s, %d posted; missing_hubs %v", id, n, a.device, truth[i].posted, missing)
			}
		}
	}
}

// listClusterEvents pages through h's GET /v1/events for device's events
// in [from, to) (unix ms) and returns how many distinct events it lists
// (by stream and sequence; a page repeats those at its next_from) and the
// hubs it names missing. An event listed twice in one page fails the test.
func listClusterEvents(t *testing.T, h *hubProc, device string, from, to int64) (uint64, []string) {
	t.Helper()
	type key struct {
		stream string
		seq    uint64
	}
	seen := map[key]bool{}
	var missing []string
	q := url.Values{"device": {device}, "limit": {"10000"}, "from": {fmt.Sprint(from)}, "to": {fmt.Sprint(to)}}
	for page := 0; page < 1000; page++ {
		var er hubapi.EventsResponse
		path := "/v1/events?" + q.Encode()
		if err := json.Unmarshal(get(t, h, path), &er); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		inPage := map[key]bool{}
		for _, e := range er.Events {
			k := key{e.Stream, e.Seq}
			if inPage[k] {
				t.Fatalf("%s: event %v listed twice in one page", path, k)
			}
			inPage[k], seen[k] = true, true
		}
		for _, m := range er.MissingHubs {
			if !slices.Contains(missing, m) {
				missing = append(missing, m)
			}
		}
		if !er.Truncated {
			return uint64(len(seen)), missing
		}
		q.Set("from", er.NextFrom)
	}
	t.Fatalf("%s's events: no end after 1000 pages", device)
	return 0, nil
}

// startClusterHubID starts hubd with id in cluster mode on the NATS
// servers at urls (8 partitions, lease TTL clusterHubsTTL), with its own
// HTTP port as its advertised URL.
func startClusterHubID(t *testing.T, dataDir, urls, id string) *hubProc {
	h := &hubProc{t: t, bin: buildHubd(t), httpAddr: fmt.Sprintf("127.0.0.1:%d", testbroker.FreePort(t))}
	h.args = []string{"--data-dir", dataDir, "--http-addr", h.httpAddr, "--nats-url", urls,
		"--nats-partitions", "8", "--checkpoint-interval", "2s", "--log-level", "warn",
		"--hub-id", id, "--cluster-lease-ttl", clusterHubsTTL.String(),
		"--http-advertise-url", "http://" + h.httpAddr}
	var err error
	if h.log, err = os.Create(filepath.Join(t.TempDir(), id+".log")); err != nil {
		t.Fatal(err)
	}
	h.start()
	t.Cleanup(h.kill)
	return h
}

// clusterStatus reads GET /v1/cluster.
func clusterStatus(h *hubProc) (hubapi.ClusterStatus, error) {
	var st hubapi.ClusterStatus
	resp, err := http.Get("http://" + h.httpAddr + "/v1/cluster")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return st, fmt.Errorf("GET /v1/cluster: %s", resp.Status)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// ownedByLive says whether every partition has an owner among ids and,
// when balanced, whether every hub of ids owns at least one.
func ownedByLive(st hubapi.ClusterStatus, ids []string, balanced bool) bool {
	owners := map[string]int{}
	for _, p := range st.PartitionStates {
		if !slices.Contains(ids, p.Owner) {
			return false
		}
		owners[p.Owner]++
	}
	if len(st.PartitionStates) != st.Partitions || st.Partitions == 0 {
		return false
	}
	if balanced {
		for _, id := range ids {
			if owners[id] == 0 {
				return false
			}
		}
	}
	return true
}
