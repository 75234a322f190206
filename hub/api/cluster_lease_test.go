package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"edgeflow/hub/api"
	"edgeflow/hub/clusterview"
	"edgeflow/hub/hubapi"
	"edgeflow/hub/internal/hubtest"
	"edgeflow/hub/lease"
	"edgeflow/hub/natslog"
	"edgeflow/internal/testnats"
)

// Lease timing of these tests: short, so a takeover takes about 2s.
const (
	leaseTTL   = 2 * time.Second
	leaseRenew = 300 * time.Millisecond
)

// leaseHub is a test hub whose cluster view is a clusterview.View of a
// real lease.Manager advertising the hub's API URL.
type leaseHub struct {
	*testHub
	natsURL string
	m       atomic.Pointer[lease.Manager]
	view    atomic.Pointer[clusterview.View]
	nc      *nats.Conn
	// frozen, when set, is what the API's view says instead of the
	// leases: the hub was paused between reading its view and answering
	// (a zombie).
	frozen atomic.Pointer[[]api.Member]
}

// liveView is the Cluster a leaseHub's API sees.
type liveView struct{ h *leaseHub }

func (v liveView) Self() string                  { return v.h.view.Load().Self() }
func (v liveView) Partitions() int               { return v.h.view.Load().Partitions() }
func (v liveView) PartitionOf(dev string) int    { return v.h.view.Load().PartitionOf(dev) }
func (v liveView) Status() hubapi.ClusterStatus  { return v.h.view.Load().Status() }
func (v liveView) HistoryHolders(p int) []string { return v.h.view.Load().HistoryHolders(p) }
func (v liveView) Members() []api.Member {
	if f := v.h.frozen.Load(); f != nil {
		return cloneMembers(*f)
	}
	return v.h.view.Load().Members()
}

func cloneMembers(ms []api.Member) []api.Member {
	out := make([]api.Member, len(ms))
	for i, m := range ms {
		out[i] = api.Member{ID: m.ID, BaseURL: m.BaseURL, Owned: maps.Clone(m.Owned)}
	}
	return out
}

// startLeaseHub starts a hub and its lease manager on natsURL.
func startLeaseHub(t *testing.T, natsURL, id string, wait time.Duration) *leaseHub {
	t.Helper()
	lh := &leaseHub{natsURL: natsURL}
	lh.testHub = startHubWith(t, id, wait, func(url string) api.Cluster {
		lh.runManager(t, id, url)
		return liveView{lh}
	})
	return lh
}

// runManager opens and runs a lease manager for the hub advertising url,
// over a new connection, and makes the hub's view its view.
func (lh *leaseHub) runManager(t *testing.T, id, url string) {
	t.Helper()
	nc, err := nats.Connect(lh.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := lease.Open(ctx, js, lease.Options{HubID: id, URL: url, Partitions: testPartitions,
		TTL: leaseTTL, Renew: leaseRenew, Replicas: 1, Logger: hubtest.QuietLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	// Applied positions stand for a hub's: 1000+p for every partition
	// (the view reports those of the partitions it owns).
	v, err := clusterview.New(m, clusterview.Options{Applied: func() map[int]uint64 {
		out := map[int]uint64{}
		for p := range testPartitions {
			out[p] = 1000 + uint64(p)
		}
		return out
	}})
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithCancel(context.Background())
	go func() { _ = m.Run(rctx) }()
	t.Cleanup(func() {
		sctx, c := context.WithTimeout(context.Background(), 2*time.Second)
		defer c()
		_ = m.Stop(sctx)
		rcancel()
	})
	lh.nc = nc
	lh.m.Store(m)
	lh.view.Store(v)
}

// owns is what the hub's manager owns now.
func (lh *leaseHub) owns() map[int]uint64 {
	out := map[int]uint64{}
	m := lh.m.Load()
	for p := range testPartitions {
		if e, ok := m.Owns(p); ok {
			out[p] = e
		}
	}
	return out
}

// settled reports whether the live hubs own the partitions as
// lease.Assign gives them (where balancing ends, so no lease moves after)
// and agree on it (agreed); it returns the owner index of each partition.
func settled(live []*leaseHub, all []*leaseHub) ([]int, bool) {
	var ids []string
	for _, h := range live {
		ids = append(ids, h.id)
	}
	target := lease.Assign(ids, testPartitions)
	owner, ok := agreed(live, all)
	if !ok {
		return nil, false
	}
	for p, o := range owner {
		if all[o].id != target[p] {
			return nil, false
		}
	}
	return owner, true
}

// agreed reports whether the live hubs own every partition once and each
// one's view holds exactly what every live hub owns (and no other hub);
// it returns the owner index of each partition.
func agreed(live []*leaseHub, all []*leaseHub) ([]int, bool) {
	owner := make([]int, testPartitions)
	for p := range owner {
		owner[p] = -1
	}
	owned := map[string]map[int]uint64{}
	for _, h := range live {
		owned[h.id] = h.owns()
		for p := range owned[h.id] {
			if owner[p] >= 0 {
				return nil, false
			}
			owner[p] = slices.Index(all, h)
		}
	}
	if slices.Contains(owner, -1) {
		return nil, false
	}
	for _, h := range live {
		ms := h.view.Load().Members()
		if len(ms) != len(live) {
			return nil, false
		}
		for _, m := range ms {
			o, ok := owned[m.ID]
			if !ok || !maps.Equal(m.Owned, o) || m.BaseURL != all[slices.IndexFunc(all, func(x *leaseHub) bool { return x.id == m.ID })].url {
				return nil, false
			}
		}
	}
	return owner, true
}

// sameValues reports whether two /v1/aggregates answers hold the same
// windows and values, leaving out revision and late: a hub that took a
// partition over and was fed its batches afterwards counts them as late
// arrivals and revisions, which the reference (fed in order) does not.
func sameValues(t *testing.T, got, want []byte) (bool, string) {
	g, w := decodeAgg(t, got), decodeAgg(t, want)
	for _, a := range []*hubapi.AggregatesResponse{&g, &w} {
		for i := range a.Windows {
			a.Windows[i].Revision, a.Windows[i].Late = 0, 0
		}
	}
	gb, _ := json.Marshal(g)
	wb, _ := json.Marshal(w)
	if string(gb) == string(wb) {
		return true, ""
	}
	return false, aggDiff(t, gb, wb)
}

// TestClusterLeases: three hubs whose cluster views come from real lease
// managers on a real nats-server answer /v1/aggregates exactly as a hub
// fed every batch, each hub fed the batches of the partitions its leases
// give it; /v1/cluster shows the leases. A hub cut off from NATS with its
// API down: answers are partial with exactly its partitions until the
// other two take them over at newer epochs; fed those partitions'
// batches, the two answer for the whole fleet again. The cut-off hub
// restarted (a new manager, same id) gets its partitions back at newer
// epochs while its API still answers with the epochs it held (a zombie):
// its answers are discarded and the partitions reported missing.
func TestClusterLeases(t *testing.T) {
	nc := testnats.Start(t, 1)
	var hubs []*leaseHub
	for i := range testHubs {
		hubs = append(hubs, startLeaseHub(t, nc.URLs(), fmt.Sprint("hub", i), 500*time.Millisecond))
	}
	var owner []int
	waitFor(t, "the three hubs to split the partitions as Assign says and agree on the leases", func() bool {
		o, ok := settled(hubs, hubs)
		owner = o
		return ok
	})
	plain := make([]*testHub, len(hubs))
	for i, h := range hubs {
		plain[i] = h.testHub
	}
	c := newTestClusterOf(t, plain)
	var ownerNow atomic.Pointer[[]int]
	ownerNow.Store(&owner)
	c.ownerOf = func(dev string) int { return (*ownerNow.Load())[natslog.PartitionOf(dev, testPartitions)] }
	for r := -1; r < 6; r++ {
		c.round(t, r)
	}
	from, to := c.base.Add(-5*time.Minute), c.base.Add(10*time.Minute)
	for _, window := range []string{"1m", "5m-1m", "session:20s"} {
		for _, groupBy := range []string{"", "&group_by=device,room"} {
			_, _, want := get(t, aggURL(c.ref.url, window, from, to, groupBy))
			for _, h := range hubs {
				// A lease renewal missed under load (TTL 500 ms, -race) leaves
				// a partition briefly without an owner: the answer then says
				// partial and names it, rightly; asked again once the lease is
				// back, it is exact.
				for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
					code, _, got := get(t, aggURL(h.url, window, from, to, groupBy))
					if code == 200 && string(got) == string(want) {
						break
					}
					a := decodeAgg(t, got)
					if code != 200 || !a.Partial || time.Now().After(deadline) {
						t.Fatalf("%s %s%s: %d partial=%v missing=%v, differs from the reference: %s\nleases now: %v", h.id, window, groupBy, code,
							a.Partial, a.MissingPartitions, aggDiff(t, got, want), leasesOf(hubs))
					}
				}
			}
		}
	}
	for _, h := range hubs {
		code, _, body := get(t, h.url+"/v1/cluster")
		var st hubapi.ClusterStatus
		if err := json.Unmarshal(body, &st); err != nil || code != 200 || st.Self != h.id || len(st.Hubs) != testHubs {
			t.Fatalf("%s /v1/cluster: %d %s", h.id, code, body)
		}
		for i, sh := range st.Hubs {
			if sh.ID != hubs[i].id || sh.BaseURL != hubs[i].url || !slices.Equal(sh.Owned, slices.Sorted(maps.Keys(hubs[i].owns()))) {
				t.Fatalf("%s /v1/cluster: hub %+v, want %s at %s owning %v", h.id, sh, hubs[i].id, hubs[i].url, hubs[i].owns())
			}
		}
		for p, ps := range st.PartitionStates {
			e, _ := hubs[owner[p]].m.Load().Owns(p)
			if ps.Owner != hubs[owner[p]].id || ps.Epoch != e || (ps.Owner != h.id && ps.LeaseExpiry.IsZero()) {
				t.Fatalf("%s /v1/cluster: partition %d %+v, want owner %s epoch %d", h.id, p, ps, hubs[owner[p]].id, e)
			}
			// Every partition's applied position, from its owner.
			if ps.Applied == nil || *ps.Applied != 1000+uint64(p) {
				t.Fatalf("%s /v1/cluster: partition %d applied %v, want %d from its owner %s", h.id, p, ps.Applied, 1000+p, ps.Owner)
			}
		}
		// local=1: this hub's own partitions' positions only.
		code, _, body = get(t, h.url+"/v1/cluster?local=1")
		var local hubapi.ClusterStatus
		if err := json.Unmarshal(body, &local); err != nil || code != 200 {
			t.Fatalf("%s /v1/cluster?local=1: %d %s", h.id, code, body)
		}
		for p, ps := range local.PartitionStates {
			if (ps.Applied != nil) != (ps.Owner == h.id) {
				t.Fatalf("%s /v1/cluster?local=1: partition %d owned by %s has applied %v", h.id, p, ps.Owner, ps.Applied)
			}
		}
	}

	// hub2 dies: API down, cut off from NATS (its leases expire).
	gone := hubs[2]
	old := gone.owns()
	oldParts := slices.Sorted(maps.Keys(old))
	gone.frozen.Store(new(gone.view.Load().Members()))
	gone.down.Store(true)
	gone.nc.Close()
	cut := time.Now()
	var others uint64
	for _, dev := range c.devices {
		if !slices.Contains(oldParts, natslog.PartitionOf(dev, testPartitions)) {
			others += uint64(c.sent[dev])
		}
	}
	takenOver := func() bool {
		for _, p := range oldParts {
			for _, h := range hubs[:2] {
				if _, ok := h.m.Load().Owns(p); ok {
					return true
				}
			}
		}
		return false
	}
	strict, answers := 0, 0
	for {
		done := func() bool { _, ok := settled(hubs[:2], hubs); return ok }()
		before := takenOver()
		code, _, body := get(t, aggURL(hubs[0].url, "1m", from, to, ""))
		a := decodeAgg(t, body)
		answers++
		// The survivors hold no data of hub2's partitions yet: whatever
		// owns them, the counts are those of the other partitions, and
		// only hub2's partitions may be missing.
		if code != 200 || totalCount(a) != others || a.Partial != (len(a.MissingPartitions) > 0) ||
			!isSubset(a.MissingPartitions, oldParts) {
			t.Fatalf("after hub2 died: %d partial=%v missing=%v count %d (want count %d, missing within %v)",
				code, a.Partial, a.MissingPartitions, totalCount(a), others, oldParts)
		}
		if !before && !takenOver() {
			// Nobody took any of hub2's partitions while this query ran.
			strict++
			if !slices.Equal(a.MissingPartitions, oldParts) {
				t.Fatalf("before any takeover: missing %v, want exactly hub2's %v", a.MissingPartitions, oldParts)
			}
		}
		if done && !a.Partial {
			break
		}
		if answers > 200 {
			t.Fatalf("after %d answers hub2's partitions are still not taken over", answers)
		}
	}
	t.Logf("hub2 died: whole answers again %v after the cut (lease TTL %v); %d answers until then, %d checked to miss exactly its partitions %v",
		time.Since(cut).Round(time.Millisecond), leaseTTL, answers, strict, oldParts)
	if strict == 0 {
		t.Fatal("no answer came back before the takeover began, so none was checked to miss exactly hub2's partitions")
	}
	owner, _ = settled(hubs[:2], hubs)
	ownerNow.Store(&owner)
	// The cut-off hub's own view names no owner once it has not seen the
	// leases renewed for TTL + Renew, rather than the owners it last saw.
	waitFor(t, "the cut-off hub's view to name no owner", func() bool {
		ms := gone.view.Load().Members()
		return len(ms) == 1 && ms[0].ID == gone.id && len(ms[0].Owned) == 0
	})
	for _, ps := range gone.view.Load().Status().PartitionStates {
		if ps.Owner != "" || ps.Epoch != 0 || !ps.LeaseExpiry.IsZero() {
			t.Fatalf("the cut-off hub's status still names partition %d's lease: %+v", ps.Partition, ps)
		}
	}
	for _, p := range oldParts {
		if e, _ := hubs[owner[p]].m.Load().Owns(p); e <= old[p] {
			t.Fatalf("partition %d taken over at epoch %d, not above hub2's %d", p, e, old[p])
		}
	}
	code, _, body := get(t, hubs[1].url+"/v1/cluster")
	var st hubapi.ClusterStatus
	if err := json.Unmarshal(body, &st); err != nil || code != 200 || len(st.Hubs) != 2 || st.Hubs[0].ID != "hub0" || st.Hubs[1].ID != "hub1" {
		t.Fatalf("/v1/cluster after the takeover: %d %s", code, body)
	}
	// Feed the new owners the batches of the partitions they took.
	for _, dev := range c.devices {
		if !slices.Contains(oldParts, natslog.PartitionOf(dev, testPartitions)) {
			continue
		}
		h := c.hubs[c.owner(dev)]
		for _, b := range c.batches[dev] {
			if err := h.srv.Publish(fmt.Sprintf("edge/v1/%s/batch", dev), b); err != nil {
				t.Fatal(err)
			}
		}
		waitFor(t, h.id+" applies "+dev+"'s replayed batches", func() bool {
			d, ok := h.srv.Device(dev)
			return ok && len(d.Streams) == 1 && d.Streams[0].Events == uint64(c.sent[dev])
		})
	}
	for _, window := range []string{"1m", "5m-1m"} {
		_, _, want := get(t, aggURL(c.ref.url, window, from, to, "&group_by=device"))
		for _, h := range hubs[:2] {
			code, _, got := get(t, aggURL(h.url, window, from, to, "&group_by=device"))
			if ok, diff := sameValues(t, got, want); code != 200 || decodeAgg(t, got).Partial || !ok {
				t.Fatalf("%s %s after the takeover: %d %s", h.id, window, code, diff)
			}
		}
	}

	// hub2 comes back: a new manager under its id takes its share back
	// at newer epochs, while its API still answers with the old ones.
	gone.down.Store(false)
	gone.runManager(t, gone.id, gone.url)
	waitFor(t, "hub2 to take its partitions back", func() bool {
		_, ok := settled(hubs, hubs)
		return ok
	})
	if got := slices.Sorted(maps.Keys(gone.owns())); !slices.Equal(got, oldParts) {
		t.Fatalf("hub2 took back %v, not its %v", got, oldParts)
	}
	for p, e := range gone.owns() {
		if e <= old[p] {
			t.Fatalf("hub2 took partition %d back at epoch %d, not above its old %d", p, e, old[p])
		}
	}
	// (Counts are not checked from here on: the test hubs keep the
	// batches of partitions they handed back, which hubd drops on
	// handoff, and their local partial sets still hold them.)
	const answersMetric = "edgeflow_hub_cluster_peer_answers_total"
	discarded := hubs[0].counter(t, answersMetric, "result", "discarded")
	code, _, body = get(t, aggURL(hubs[0].url, "1m", from, to, ""))
	a := decodeAgg(t, body)
	if code != 200 || !a.Partial || !slices.Equal(a.MissingPartitions, oldParts) {
		t.Fatalf("hub2 answering with its old epochs: %d partial=%v missing=%v, want exactly %v missing", code, a.Partial, a.MissingPartitions, oldParts)
	}
	if hubs[0].counter(t, answersMetric, "result", "discarded") <= discarded {
		t.Fatal("hub2's stale answers were not counted as discarded")
	}
	// Its API back on the leases: its answers are accepted again.
	gone.frozen.Store(nil)
	code, h, body := get(t, aggURL(gone.url, "1m", from, to, "&local=1"))
	if code != 200 || h.Get(hubapi.PartitionsHeader) != hubapi.FormatPartitions(gone.owns()) {
		t.Fatalf("hub2 local: %d %s %q, want %q", code, body, h.Get(hubapi.PartitionsHeader), hubapi.FormatPartitions(gone.owns()))
	}
	code, _, body = get(t, aggURL(hubs[0].url, "1m", from, to, ""))
	if a := decodeAgg(t, body); code != 200 || a.Partial {
		t.Fatalf("with hub2 back on the leases: %d partial=%v missing=%v", code, a.Partial, a.MissingPartitions)
	}
}

func isSubset(a, b []int) bool {
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}

// leasesOf says what each hub owns now, for failure messages.
func leasesOf(hubs []*leaseHub) string {
	var out []string
	for _, h := range hubs {
		out = append(out, fmt.Sprintf("%s %v", h.id, h.owns()))
	}
	return strings.Join(out, "; ")
}
