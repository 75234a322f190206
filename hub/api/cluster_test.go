package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"edgeflow/aggregate"
	"edgeflow/hub"
	"edgeflow/hub/api"
	"edgeflow/hub/hubapi"
	"edgeflow/hub/internal/hubtest"
	"edgeflow/hub/natslog"
	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// testView is one hub's view of a test cluster: the members with the
// partitions they own at their epochs. Each hub has its own copy, so a
// test can make one hub's view disagree with another's (a stale epoch).
// onMembers, when set, runs before each Members call (after the lock is
// released), so a test can change ownership between a fan-out's tries.
type testView struct {
	self      string
	n         int
	mu        sync.Mutex
	members   []api.Member
	onMembers func(call int)
	calls     int
	holders   map[int][]string // HistoryHolders
}

func (v *testView) HistoryHolders(p int) []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.Clone(v.holders[p])
}

func (v *testView) Self() string                  { return v.self }
func (v *testView) Partitions() int               { return v.n }
func (v *testView) PartitionOf(device string) int { return natslog.PartitionOf(device, v.n) }

func (v *testView) Members() []api.Member {
	v.mu.Lock()
	v.calls++
	call, hook := v.calls, v.onMembers
	v.mu.Unlock()
	if hook != nil {
		hook(call)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make([]api.Member, len(v.members))
	for i, m := range v.members {
		out[i] = api.Member{ID: m.ID, BaseURL: m.BaseURL, Owned: maps.Clone(m.Owned)}
	}
	return out
}

// setOwned sets what hub id owns in this view.
func (v *testView) setOwned(id string, owned map[int]uint64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for i := range v.members {
		if v.members[i].ID == id {
			v.members[i].Owned = maps.Clone(owned)
		}
	}
}

func (v *testView) Status() hubapi.ClusterStatus {
	ms := v.Members()
	st := hubapi.ClusterStatus{Self: v.self, Partitions: v.n, PartitionStates: make([]hubapi.ClusterPartition, v.n)}
	for p := range st.PartitionStates {
		st.PartitionStates[p].Partition = p
	}
	expiry := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, m := range ms {
		h := hubapi.ClusterHub{ID: m.ID, BaseURL: m.BaseURL, Owned: slices.Sorted(maps.Keys(m.Owned))}
		st.Hubs = append(st.Hubs, h)
		for p, e := range m.Owned {
			st.PartitionStates[p].Owner, st.PartitionStates[p].Epoch, st.PartitionStates[p].LeaseExpiry = m.ID, e, expiry
		}
	}
	return st
}

// testHub is a real single-node hub (its own Badger directory and
// embedded broker) served through an api.API with a cluster view.
type testHub struct {
	id    string
	srv   *hub.Server
	url   string
	view  *testView
	asked atomic.Int64 // requests its HTTP server received
	down  atomic.Bool  // when set, its HTTP server answers 503 to all
	reg   *prometheus.Registry
}

// counter is the value of a counter of h's API with the given label.
func (h *testHub) counter(t *testing.T, name, label, value string) float64 {
	t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

const (
	testPartitions = 6
	testHubs       = 3
)

// startTestHub starts a hub whose API has view (nil: a single hub).
func startTestHub(t *testing.T, id string, view *testView, wait time.Duration) *testHub {
	t.Helper()
	th := startHubWith(t, id, wait, func(string) api.Cluster {
		if view == nil {
			return nil
		}
		return view
	})
	th.view = view
	return th
}

// startHubWith starts a hub whose API has the cluster cluster returns
// (nil: a single hub); cluster gets the base URL the hub's API listens
// at before the API starts.
func startHubWith(t *testing.T, id string, wait time.Duration, cluster func(url string) api.Cluster) *testHub {
	t.Helper()
	o := hub.Options{DataDir: t.TempDir(), HTTPAddr: hub.HTTPOff, MQTTListen: "127.0.0.1:0", Logger: hubtest.QuietLogger(t),
		CheckpointInterval: time.Hour, RetentionInterval: time.Hour, TickInterval: 50 * time.Millisecond,
		Aggregate: &aggregate.Options{IdleTimeout: time.Hour, WatermarkInterval: time.Nanosecond, TagKeys: []string{"room"},
			Windows: []aggregate.WindowConfig{{Name: "1m", Kind: "tumbling", Size: time.Minute},
				{Name: "5m-1m", Kind: "hopping", Size: 5 * time.Minute, Slide: time.Minute}}}}
	s, err := hub.New(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	reg := prometheus.NewRegistry()
	cfg := api.Config{Engine: s.Engine(), Gatherer: reg, Registerer: reg,
		Logger: hubtest.QuietLogger(t), StreamHeartbeat: time.Second, MaxQueries: 8, QueryWait: time.Second,
		QueryTimeout: 30 * time.Second, ClusterWait: wait}
	th := &testHub{id: id, srv: s, reg: reg}
	var h http.Handler
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		th.asked.Add(1)
		if th.down.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		h.ServeHTTP(w, r)
	}))
	if c := cluster("http://" + hs.Listener.Addr().String()); c != nil {
		cfg.Cluster = c
	}
	a, err := api.New(s, cfg)
	if err != nil {
		hs.Close()
		t.Fatal(err)
	}
	h = a.Handler()
	hs.Start()
	t.Cleanup(hs.Close)
	th.url = hs.URL
	return th
}

// testCluster is three hubs sharing testPartitions partitions
// (partition p owned by hub p%3 at epoch p+1), plus a reference hub that
// gets every batch.
type testCluster struct {
	hubs    []*testHub
	ref     *testHub
	devices []string
	base    time.Time
	stream  map[string]wire.StreamID
	seq     map[string]uint64
	sent    map[string]int      // events per device
	batches map[string][][]byte // every batch sent per device, in order
	at      map[string]int      // events sent to a hub ("hub/device")
	// ownerOf, when set, is the index of the hub owning a device's
	// partition (by default partition p is hub p%testHubs's).
	ownerOf func(dev string) int
}

func ownedBy(h int) map[int]uint64 {
	m := map[int]uint64{}
	for p := range testPartitions {
		if p%testHubs == h {
			m[p] = uint64(p + 1)
		}
	}
	return m
}

func newTestCluster(t *testing.T, wait time.Duration) *testCluster {
	var hubs []*testHub
	for i := range testHubs {
		v := &testView{self: fmt.Sprint("hub", i), n: testPartitions}
		hubs = append(hubs, startTestHub(t, v.self, v, wait))
	}
	for _, h := range hubs {
		for i, o := range hubs {
			h.view.members = append(h.view.members, api.Member{ID: o.id, BaseURL: o.url, Owned: ownedBy(i)})
		}
	}
	return newTestClusterOf(t, hubs)
}

// newTestClusterOf is a test cluster of hubs (already started) with a
// reference hub and the devices.
func newTestClusterOf(t *testing.T, hubs []*testHub) *testCluster {
	c := &testCluster{hubs: hubs, stream: map[string]wire.StreamID{}, seq: map[string]uint64{}, sent: map[string]int{},
		batches: map[string][][]byte{}}
	c.ref = startTestHub(t, "ref", nil, 0)
	for d := range 12 {
		dev := fmt.Sprint("dev-", d)
		c.devices = append(c.devices, dev)
		c.stream[dev] = wire.NewStreamID()
		c.seq[dev] = 1
	}
	c.base = time.Now().Add(-time.Hour).Truncate(time.Minute)
	return c
}

// owner is the index of the hub owning dev's partition.
func (c *testCluster) owner(dev string) int {
	if c.ownerOf != nil {
		return c.ownerOf(dev)
	}
	return natslog.PartitionOf(dev, testPartitions) % testHubs
}

// round sends every device one batch of 5 events in minute r (to its
// owner and to the reference) and waits until all are applied. Round -1
// is one event of every device at one time, a minute before base: once
// every stream is known, each round's events are past every stream's
// watermark, so no event is late on any hub (late arrivals depend on the
// order batches of different devices reach each hub, which differs
// between the cluster and the reference).
func (c *testCluster) round(t *testing.T, r int) {
	t.Helper()
	rooms := []string{"r1", "r2", "r3"}
	events := 5
	if r < 0 {
		events = 1
	}
	for di, dev := range c.devices {
		sid := c.stream[dev]
		b := &wirepb.Batch{DeviceId: dev, StreamId: sid[:], FirstSeq: c.seq[dev], SendTimeNs: time.Now().UnixNano(),
			Clock: &wirepb.ClockEstimate{Method: wirepb.TimeMethod_TIME_METHOD_NTP}}
		for j := range events {
			n := r*5 + j
			ts := c.base.Add(time.Duration(r)*time.Minute + time.Duration(j*11+di)*time.Second)
			if r < 0 {
				ts, n = c.base.Add(-time.Minute), di
			}
			b.Events = append(b.Events, &wirepb.Event{Metric: "temp", Value: float64((n*37+di*11)%400-150) / 8,
				DeviceTimeNs: ts.UnixNano(), Tags: []*wirepb.Tag{{Key: "room", Value: rooms[(n+di)%3]}},
				MonoNs: int64(c.seq[dev]) + int64(j), BootId: "b", Method: wirepb.TimeMethod_TIME_METHOD_NTP})
		}
		payload := hubtest.EncodeBatch(t, b)
		c.batches[dev] = append(c.batches[dev], payload)
		for _, h := range []*testHub{c.hubs[c.owner(dev)], c.ref} {
			c.send(t, h, dev, payload, events)
		}
		c.seq[dev] += uint64(events)
		c.sent[dev] += events
	}
	for _, dev := range c.devices {
		for _, h := range []*testHub{c.hubs[c.owner(dev)], c.ref} {
			c.waitApplied(t, h, dev)
		}
	}
}

// send publishes one of dev's batches, of events events, to hub h.
func (c *testCluster) send(t *testing.T, h *testHub, dev string, payload []byte, events int) {
	t.Helper()
	if err := h.srv.Publish(wire.BatchTopic(dev), payload); err != nil {
		t.Fatal(err)
	}
	if c.at == nil {
		c.at = map[string]int{}
	}
	c.at[h.id+"/"+dev] += events
}

// waitApplied waits until hub h applied every event of dev sent to it.
func (c *testCluster) waitApplied(t *testing.T, h *testHub, dev string) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%s applies %s's events", h.id, dev), func() bool {
		d, ok := h.srv.Device(dev)
		return ok && len(d.Streams) == 1 && d.Streams[0].Events == uint64(c.at[h.id+"/"+dev])
	})
}

// waitFor polls cond until it holds; a condition that never holds fails
// the test after a generous bound (a hang guard, not a timing claim).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// get asks url and returns the status, header and body.
func get(t *testing.T, u string) (int, http.Header, []byte) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, body
}

func aggURL(base, window string, from, to time.Time, extra string) string {
	return fmt.Sprintf("%s/v1/aggregates?metric=temp&window=%s&from=%d&to=%d&aggs=count,sum,min,max,avg,last,p50,p95,p99%s",
		base, url.QueryEscape(window), from.UnixMilli(), to.UnixMilli(), extra)
}

func decodeAgg(t *testing.T, body []byte) hubapi.AggregatesResponse {
	t.Helper()
	var a hubapi.AggregatesResponse
	if err := json.Unmarshal(body, &a); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	return a
}

// aggDiff says where two /v1/aggregates answers first differ.
func aggDiff(t *testing.T, got, want []byte) string {
	g, w := decodeAgg(t, got), decodeAgg(t, want)
	for i := range min(len(g.Windows), len(w.Windows)) {
		a, _ := json.Marshal(g.Windows[i])
		b, _ := json.Marshal(w.Windows[i])
		if string(a) != string(b) {
			return fmt.Sprintf("window %d:\n got %s\nwant %s", i, a, b)
		}
	}
	g.Windows, w.Windows = nil, nil
	return fmt.Sprintf("%d vs %d windows; head %+v vs %+v", len(got), len(want), g, w)
}

func totalCount(a hubapi.AggregatesResponse) (n uint64) {
	for _, w := range a.Windows {
		n += w.Count
	}
	return n
}

// TestClusterOneAnswer: three real hubs, each fed the batches of the
// devices whose partitions it owns, answer /v1/aggregates (any of them,
// every window kind and grouping) exactly as a fourth hub fed every batch
// does; /v1/devices is the union (paged too); /v1/devices/{id} and
// /v1/events come from the owner.
func TestClusterOneAnswer(t *testing.T) {
	c := newTestCluster(t, 2*time.Second)
	for r := -1; r < 6; r++ {
		c.round(t, r)
	}
	from, to := c.base.Add(-5*time.Minute), c.base.Add(10*time.Minute)
	for _, window := range []string{"1m", "5m-1m", "tumbling:2m", "session:20s"} {
		for _, groupBy := range []string{"", "&group_by=device", "&group_by=room", "&group_by=device,room"} {
			code, _, want := get(t, aggURL(c.ref.url, window, from, to, groupBy))
			if code != 200 || len(decodeAgg(t, want).Windows) == 0 {
				t.Fatalf("reference: %d %s", code, want)
			}
			for _, h := range c.hubs {
				code, _, got := get(t, aggURL(h.url, window, from, to, groupBy))
				if code != 200 || string(got) != string(want) {
					t.Fatalf("%s %s%s: %d, differs from the reference: %s", h.id, window, groupBy, code, aggDiff(t, got, want))
				}
			}
		}
	}
	// One device's windows come from its owner alone.
	dev := c.devices[0]
	_, _, want := get(t, aggURL(c.ref.url, "1m", from, to, "&device="+dev))
	_, _, got := get(t, aggURL(c.hubs[(c.owner(dev)+1)%testHubs].url, "1m", from, to, "&device="+dev))
	if string(got) != string(want) || totalCount(decodeAgg(t, got)) != uint64(c.sent[dev]) {
		t.Fatalf("device %s: %s", dev, aggDiff(t, got, want))
	}

	// Devices: the union, in pages too.
	var all []string
	for _, h := range c.hubs {
		all = all[:0]
		after := ""
		for page := 0; ; page++ {
			u := h.url + "/v1/devices?limit=5"
			if after != "" {
				u += "&after=" + after
			}
			code, _, body := get(t, u)
			var dr hubapi.DevicesResponse
			if err := json.Unmarshal(body, &dr); err != nil || code != 200 || dr.Partial {
				t.Fatalf("%s devices: %d %s", h.id, code, body)
			}
			for _, d := range dr.Devices {
				all = append(all, d.ID)
			}
			if dr.Next == "" || page > len(c.devices) {
				break
			}
			after = dr.Next
		}
		if want := slices.Sorted(slices.Values(c.devices)); !slices.Equal(all, want) {
			t.Fatalf("%s devices: %v, want %v", h.id, all, want)
		}
	}

	// One device and its events: the owner's answer, from any hub (the
	// events with the hub whose log holds them: here the owner's alone).
	for _, dev := range c.devices[:4] {
		owner := c.hubs[c.owner(dev)]
		_, _, direct := get(t, owner.url+"/v1/devices/"+dev+"?local=1")
		path := fmt.Sprintf("/v1/events?device=%s&from=%d&to=%d", dev, from.UnixMilli(), to.UnixMilli())
		_, _, directEvents := get(t, owner.url+path+"&local=1")
		for _, h := range c.hubs {
			if code, _, body := get(t, h.url+"/v1/devices/"+dev); code != 200 || string(body) != string(direct) {
				t.Fatalf("%s device %s: %d %s\nowner says %s", h.id, dev, code, body, direct)
			}
			code, _, body := get(t, h.url+path)
			var er hubapi.EventsResponse
			if err := json.Unmarshal(body, &er); err != nil || code != 200 {
				t.Fatalf("%s %s: %d %s", h.id, path, code, body)
			}
			for i := range er.Events {
				if er.Events[i].Hub != owner.id {
					t.Fatalf("%s %s: event %d from hub %q, want the owner %s", h.id, path, i, er.Events[i].Hub, owner.id)
				}
				er.Events[i].Hub = ""
			}
			if got, _ := json.Marshal(er); string(got)+"\n" != string(directEvents) {
				t.Fatalf("%s %s: %s\nowner says %s", h.id, path, got, directEvents)
			}
		}
	}
	code, _, body := get(t, fmt.Sprintf("%s/v1/events?device=%s&from=%d&to=%d", c.hubs[0].url, c.devices[1], from.UnixMilli(), to.UnixMilli()))
	var er hubapi.EventsResponse
	if err := json.Unmarshal(body, &er); err != nil || code != 200 || len(er.Events) != c.sent[c.devices[1]] {
		t.Fatalf("events of %s: %d %s", c.devices[1], code, body)
	}
}

// devicesOf counts the events sent by the devices hub h owns.
func (c *testCluster) eventsOf(h int) (n uint64) {
	for _, dev := range c.devices {
		if c.owner(dev) == h {
			n += uint64(c.sent[dev])
		}
	}
	return n
}

// setAll sets what hub id owns in every hub's view.
func (c *testCluster) setAll(id string, owned map[int]uint64) {
	for _, h := range c.hubs {
		h.view.setOwned(id, owned)
	}
}

func partitionsOf(h int) []int { return slices.Sorted(maps.Keys(ownedBy(h))) }

// TestClusterFaults: a hub that cannot answer or a partition without an
// owner gives a partial answer naming the partitions after the wait; an
// owner that appears within the wait gives the whole answer; an answer for
// an epoch older than the view's is discarded; a local=1 request never
// fans out; the merged stream carries every hub's updates; GET
// /v1/cluster; bad parameters are 400s naming the parameter.
func TestClusterFaults(t *testing.T) {
	c := newTestCluster(t, 300*time.Millisecond)
	for r := -1; r < 3; r++ {
		c.round(t, r)
	}
	from, to := c.base.Add(-5*time.Minute), c.base.Add(10*time.Minute)
	_, _, whole := get(t, aggURL(c.ref.url, "1m", from, to, ""))
	total := totalCount(decodeAgg(t, whole))
	if total != c.eventsOf(0)+c.eventsOf(1)+c.eventsOf(2) || c.eventsOf(2) == 0 {
		t.Fatalf("reference counts %d events; hubs own %d, %d, %d", total, c.eventsOf(0), c.eventsOf(1), c.eventsOf(2))
	}
	partial := func(t *testing.T, h *testHub, wantMissing []int, wantCount uint64) {
		t.Helper()
		code, _, body := get(t, aggURL(h.url, "1m", from, to, ""))
		a := decodeAgg(t, body)
		if code != 200 || !a.Partial || !slices.Equal(a.MissingPartitions, wantMissing) || totalCount(a) != wantCount {
			t.Fatalf("%s: %d partial=%v missing=%v count=%d; want partial, missing %v, count %d", h.id, code, a.Partial,
				a.MissingPartitions, totalCount(a), wantMissing, wantCount)
		}
		for _, w := range a.Windows {
			if w.Final {
				t.Fatalf("a partial answer has a final window: %+v", w)
			}
		}
	}

	t.Run("owner down", func(t *testing.T) {
		c.hubs[2].down.Store(true)
		defer c.hubs[2].down.Store(false)
		partial(t, c.hubs[0], partitionsOf(2), c.eventsOf(0)+c.eventsOf(1))
	})
	t.Run("no owner", func(t *testing.T) {
		c.setAll("hub2", nil)
		defer c.setAll("hub2", ownedBy(2))
		partial(t, c.hubs[1], partitionsOf(2), c.eventsOf(0)+c.eventsOf(1))
		// The device listing says the same.
		code, _, body := get(t, c.hubs[1].url+"/v1/devices")
		var dr hubapi.DevicesResponse
		if err := json.Unmarshal(body, &dr); err != nil || code != 200 || !dr.Partial || !slices.Equal(dr.MissingPartitions, partitionsOf(2)) {
			t.Fatalf("devices without hub2's partitions: %d %s", code, body)
		}
		// A device of a partition without owner: 503 naming it.
		for _, dev := range c.devices {
			if c.owner(dev) == 2 {
				code, _, body := get(t, c.hubs[0].url+"/v1/devices/"+dev)
				if code != 503 || !strings.Contains(string(body), fmt.Sprint("partition ", natslog.PartitionOf(dev, testPartitions))) {
					t.Fatalf("device %s without owner: %d %s", dev, code, body)
				}
				break
			}
		}
	})
	t.Run("owner within the wait", func(t *testing.T) {
		v := c.hubs[0].view
		v.setOwned("hub2", nil)
		v.mu.Lock()
		v.calls, v.onMembers = 0, func(call int) {
			if call == 2 { // the fan-out's second try finds the new owner
				v.setOwned("hub2", ownedBy(2))
			}
		}
		v.mu.Unlock()
		defer func() {
			v.mu.Lock()
			v.onMembers = nil
			v.mu.Unlock()
			v.setOwned("hub2", ownedBy(2))
		}()
		code, _, body := get(t, aggURL(c.hubs[0].url, "1m", from, to, ""))
		if code != 200 || string(body) != string(whole) {
			t.Fatalf("owner found within the wait: %d %s", code, aggDiff(t, body, whole))
		}
	})
	t.Run("stale epoch", func(t *testing.T) {
		// hub0 sees hub1's leases at newer epochs than hub1 answers for:
		// hub1's answer is discarded.
		newer := ownedBy(1)
		for p := range newer {
			newer[p] += 10
		}
		c.hubs[0].view.setOwned("hub1", newer)
		defer c.hubs[0].view.setOwned("hub1", ownedBy(1))
		const answers, partials = "edgeflow_hub_cluster_peer_answers_total", "edgeflow_hub_cluster_partial_answers_total"
		discarded := c.hubs[0].counter(t, answers, "result", "discarded")
		partialAnswers := c.hubs[0].counter(t, partials, "endpoint", "/v1/aggregates")
		partial(t, c.hubs[0], partitionsOf(1), c.eventsOf(0)+c.eventsOf(2))
		if c.hubs[0].counter(t, answers, "result", "discarded") <= discarded ||
			c.hubs[0].counter(t, partials, "endpoint", "/v1/aggregates") != partialAnswers+1 {
			t.Fatal("the discarded answers and the partial answer are not counted")
		}
	})
	t.Run("loop guard", func(t *testing.T) {
		before1, before2 := c.hubs[1].asked.Load(), c.hubs[2].asked.Load()
		code, h, body := get(t, aggURL(c.hubs[0].url, "1m", from, to, "&local=1"))
		a := decodeAgg(t, body)
		if code != 200 || a.Partial || totalCount(a) != c.eventsOf(0) || h.Get(hubapi.PartitionsHeader) != hubapi.FormatPartitions(ownedBy(0)) {
			t.Fatalf("local=1: %d, %d events (own %d), %s %q", code, totalCount(a), c.eventsOf(0), hubapi.PartitionsHeader, h.Get(hubapi.PartitionsHeader))
		}
		if c.hubs[1].asked.Load() != before1 || c.hubs[2].asked.Load() != before2 {
			t.Fatal("a local=1 request was fanned out to peers")
		}
		get(t, aggURL(c.hubs[0].url, "1m", from, to, ""))
		if c.hubs[1].asked.Load() == before1 || c.hubs[2].asked.Load() == before2 {
			t.Fatal("a fleet-wide request did not ask the peers")
		}
	})
	t.Run("cluster status", func(t *testing.T) {
		code, _, body := get(t, c.hubs[1].url+"/v1/cluster")
		var st hubapi.ClusterStatus
		if err := json.Unmarshal(body, &st); err != nil || code != 200 || st.Self != "hub1" || st.Partitions != testPartitions ||
			len(st.Hubs) != testHubs || len(st.PartitionStates) != testPartitions {
			t.Fatalf("/v1/cluster: %d %s", code, body)
		}
		for i, h := range st.Hubs {
			if h.ID != fmt.Sprint("hub", i) || h.BaseURL != c.hubs[i].url || !slices.Equal(h.Owned, partitionsOf(i)) {
				t.Fatalf("hub %d: %+v", i, h)
			}
		}
		for p, ps := range st.PartitionStates {
			if ps.Partition != p || ps.Owner != fmt.Sprint("hub", p%testHubs) || ps.Epoch != uint64(p+1) || ps.LeaseExpiry.IsZero() {
				t.Fatalf("partition %d: %+v", p, ps)
			}
		}
		code, _, body = get(t, c.ref.url+"/v1/cluster")
		var e hubapi.APIError
		if err := json.Unmarshal(body, &e); err != nil || code != 404 || !strings.Contains(e.Error, "not part of a cluster") {
			t.Fatalf("/v1/cluster on a single hub: %d %s", code, body)
		}
	})
	t.Run("bad params", func(t *testing.T) {
		rng := fmt.Sprintf("&from=%d&to=%d", from.UnixMilli(), to.UnixMilli())
		for _, tc := range []struct {
			hub         *testHub
			path, param string
		}{
			{c.hubs[0], "/v1/aggregates?window=1m" + rng, "metric"},
			{c.hubs[0], "/v1/aggregates?metric=temp&window=nope" + rng, "window"},
			{c.hubs[0], "/v1/aggregates?metric=temp&window=1m&device=bad%2Bid" + rng, "device"},
			{c.hubs[0], "/v1/aggregates?metric=temp&window=1m&local=maybe" + rng, "local"},
			{c.hubs[0], "/v1/aggregates?metric=temp&window=1m&local=1&local=1" + rng, "local"},
			{c.hubs[0], "/v1/aggregates?metric=temp&window=1m&to=1", "from"},
			{c.ref, "/v1/aggregates?metric=temp&window=1m&local=1" + rng, "local"},
			{c.hubs[1], "/v1/devices?limit=0", "limit"},
			{c.hubs[1], "/v1/devices?after=bad%2Bid", "after"},
			{c.hubs[1], "/v1/devices/bad%2Bid", "id"},
			{c.hubs[1], "/v1/events?metric=temp" + rng, "device"},
			{c.hubs[1], "/v1/events?device=dev-0&from=x&to=1", "from"},
			{c.hubs[1], "/v1/stream?from=3", "from"},
			{c.hubs[1], "/v1/stream?window=nope", "window"},
			{c.hubs[1], "/v1/cluster?x=1", "x"},
		} {
			code, _, body := get(t, tc.hub.url+tc.path)
			var e hubapi.APIError
			if err := json.Unmarshal(body, &e); err != nil || code != 400 || e.Param != tc.param {
				t.Errorf("%s %s: %d %s; want 400 naming %s", tc.hub.id, tc.path, code, body, tc.param)
			}
		}
	})
	t.Run("merged stream", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.hubs[2].url+"/v1/stream?window=1m&metric=temp", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("stream: %s", resp.Status)
		}
		type sse struct{ name, data string }
		events := make(chan sse, 1024)
		go func() {
			defer close(events)
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(nil, 1<<20)
			var name string
			for sc.Scan() {
				line := sc.Text()
				switch {
				case strings.HasPrefix(line, "event: "):
					name = strings.TrimPrefix(line, "event: ")
				case strings.HasPrefix(line, "data: "):
					events <- sse{name, strings.TrimPrefix(line, "data: ")}
				}
			}
		}()
		// Every hub's watermark moves with each round; the merged stream
		// carries each hub's, named. Peers connect in the background, so
		// rounds go on until all three are seen.
		seen := map[string]bool{}
		for r := 3; len(seen) < testHubs; r++ {
			if r > 40 {
				t.Fatalf("after %d rounds the merged stream carried watermarks of %v only", r-3, seen)
			}
			c.round(t, r)
			for drained := false; !drained; {
				select {
				case e, ok := <-events:
					if !ok {
						t.Fatal("merged stream ended")
					}
					var d struct {
						Hub         string `json:"hub"`
						WatermarkMs int64  `json:"watermark_ms"`
					}
					if err := json.Unmarshal([]byte(e.data), &d); err != nil || d.Hub == "" {
						t.Fatalf("event %s without hub: %s", e.name, e.data)
					}
					if e.name == "watermark" && d.WatermarkMs > 0 {
						seen[d.Hub] = true
					}
				case <-time.After(200 * time.Millisecond):
					drained = true
				}
			}
		}
	})
}
