package api_test

import (
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
}

const (
	testPartitions = 6
	testHubs       = 3
)

// startTestHub starts a hub whose API has view (nil: a single hub).
func startTestHub(t *testing.T, id string, view *testView, wait time.Duration) *testHub {
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
	cfg := api.Config{Engine: s.Engine(), Gatherer: prometheus.NewRegistry(), Registerer: prometheus.NewRegistry(),
		Logger: hubtest.QuietLogger(t), StreamHeartbeat: time.Second, MaxQueries: 8, QueryWait: time.Second,
		QueryTimeout: 30 * time.Second, ClusterWait: wait}
	if view != nil {
		cfg.Cluster = view
	}
	a, err := api.New(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	th := &testHub{id: id, srv: s, view: view}
	h := a.Handler()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		th.asked.Add(1)
		h.ServeHTTP(w, r)
	}))
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
	sent    map[string]int // events per device
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
	c := &testCluster{stream: map[string]wire.StreamID{}, seq: map[string]uint64{}, sent: map[string]int{}}
	for i := range testHubs {
		v := &testView{self: fmt.Sprint("hub", i), n: testPartitions}
		c.hubs = append(c.hubs, startTestHub(t, v.self, v, wait))
	}
	for _, h := range c.hubs {
		for i, o := range c.hubs {
			h.view.members = append(h.view.members, api.Member{ID: o.id, BaseURL: o.url, Owned: ownedBy(i)})
		}
	}
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
func (c *testCluster) owner(dev string) int { return natslog.PartitionOf(dev, testPartitions) % testHubs }

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
		for _, h := range []*testHub{c.hubs[c.owner(dev)], c.ref} {
			if err := h.srv.Publish(wire.BatchTopic(dev), payload); err != nil {
				t.Fatal(err)
			}
		}
		c.seq[dev] += uint64(events)
		c.sent[dev] += events
	}
	for _, dev := range c.devices {
		for _, h := range []*testHub{c.hubs[c.owner(dev)], c.ref} {
			waitFor(t, fmt.Sprintf("%s applies %s's events", h.id, dev), func() bool {
				d, ok := h.srv.Device(dev)
				return ok && len(d.Streams) == 1 && d.Streams[0].Events == uint64(c.sent[dev])
			})
		}
	}
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

	// One device and its events: the owner's answer, from any hub.
	for _, dev := range c.devices[:4] {
		owner := c.hubs[c.owner(dev)]
		for _, path := range []string{"/v1/devices/" + dev,
			fmt.Sprintf("/v1/events?device=%s&from=%d&to=%d", dev, from.UnixMilli(), to.UnixMilli())} {
			sep := "?"
			if strings.Contains(path, "?") {
				sep = "&"
			}
			_, _, direct := get(t, owner.url+path+sep+"local=1")
			for _, h := range c.hubs {
				code, _, body := get(t, h.url+path)
				if code != 200 || string(body) != string(direct) {
					t.Fatalf("%s %s: %d %s\nowner says %s", h.id, path, code, body, direct)
				}
			}
		}
	}
	code, _, body := get(t, fmt.Sprintf("%s/v1/events?device=%s&from=%d&to=%d", c.hubs[0].url, c.devices[1], from.UnixMilli(), to.UnixMilli()))
	var er hubapi.EventsResponse
	if err := json.Unmarshal(body, &er); err != nil || code != 200 || len(er.Events) != c.sent[c.devices[1]] {
		t.Fatalf("events of %s: %d %s", c.devices[1], code, body)
	}
}
