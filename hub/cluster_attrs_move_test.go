package hub

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"testing"
	"time"

	"edgeflow/aggregate"
	"edgeflow/hub/attrs"
	"edgeflow/hub/hubapi"
	"edgeflow/hub/natslog"
	"edgeflow/internal/testnats"
	"edgeflow/wire"
)

// attrMove is TestClusterAttributesMove's record of what it wrote to the
// stream, for the brute-force join.
type attrMove struct {
	t        *testing.T
	devices  []string
	streams  map[string]wire.StreamID
	next     map[string]uint64
	sent     []sentEvent
	versions []attrVersion
	base     time.Time
}

// events publishes one batch of device, at the given offsets from base.
func (m *attrMove) events(s *Server, device string, offsets ...time.Duration) {
	m.t.Helper()
	var ts []int64
	var vs []float64
	for i, off := range offsets {
		ts = append(ts, m.base.Add(off).UnixNano())
		vs = append(vs, float64(m.next[device]+uint64(i)))
		m.sent = append(m.sent, sentEvent{device, ts[i], vs[i]})
	}
	first := m.next[device]
	m.next[device] += uint64(len(offsets))
	if _, err := s.cl.Log().Publish(context.Background(), device, encodeBatch(m.t, timedBatch(device, m.streams[device], first, ts, vs))); err != nil {
		m.t.Fatal(err)
	}
}

// version publishes an attribute version of device as a hub's API does.
func (m *attrMove) version(s *Server, device, site string, from time.Duration) {
	m.t.Helper()
	v := attrs.Version{From: m.base.Add(from).UnixNano(), Attrs: map[string]string{"site": site}}
	if _, err := s.cl.Log().PublishAttrs(context.Background(), []natslog.Entry{{Device: device, Data: attrs.EncodeVersion(v), ID: fmt.Sprintf("attrs-%s-%d", device, len(m.versions))}}); err != nil {
		m.t.Fatal(err)
	}
	m.versions = append(m.versions, attrVersion{device, site, v.From})
}

// engineSites is querySites from s's engine (this hub's partitions only,
// without asking the other hubs).
func engineSites(t *testing.T, s *Server, base time.Time) map[string]string {
	t.Helper()
	res, err := s.Engine().Query(aggregate.Query{Metric: "temp", WindowName: "1m", From: base.Add(-time.Hour), To: base.Add(time.Hour),
		GroupBy: []string{"attr.site"}, Aggs: aggregate.AggCount | aggregate.AggSum})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, w := range res {
		out[w.Start.UTC().Format(time.RFC3339)+" "+w.Group["attr.site"]] = fmt.Sprintf("n=%d sum=%g", w.Count, w.Sum)
	}
	return out
}

// localSites is engineSites through the HTTP API's local=1 answer (the
// hub's own partitions; a fleet-wide answer refuses attr.* dimensions).
func localSites(t *testing.T, s *Server, base time.Time) map[string]string {
	t.Helper()
	var r hubapi.AggregatesResponse
	if code, body := getJSON(t, s.Handler(), aggPath("temp", "1m", base.Add(-time.Hour), base.Add(time.Hour), "&group_by=attr.site&aggs=count,sum&local=1"), &r); code != 200 {
		t.Fatalf("/v1/aggregates?local=1: %d %s", code, body)
	}
	out := map[string]string{}
	for _, w := range r.Windows {
		out[w.Start+" "+w.Group["attr.site"]] = fmt.Sprintf("n=%d sum=%g", w.Count, *w.Sum)
	}
	return out
}

// check waits until s's group_by=attr.site over its partitions' devices
// equals the brute-force join of what was sent to them, from its engine
// and then from its API's local=1 answer.
func (m *attrMove) check(s *Server, what string) {
	m.t.Helper()
	parts := owned(s)
	n := s.opts.NATS.Log.Partitions
	var sent []sentEvent
	for _, e := range m.sent {
		if slices.Contains(parts, natslog.PartitionOf(e.device, n)) {
			sent = append(sent, e)
		}
	}
	want := bruteSites(sent, m.versions)
	deadline := time.Now().Add(clusterWithin)
	for {
		got := engineSites(m.t, s, m.base)
		if maps.Equal(got, want) {
			if api := localSites(m.t, s, m.base); !maps.Equal(api, want) {
				m.t.Fatalf("%s: %s's /v1/aggregates?local=1 differs from its engine:\n got %v\nwant %v", what, s.opts.HubID, api, want)
			}
			m.t.Logf("%s: %s (partitions %v) joins %d events into %d windows as brute force does", what, s.opts.HubID, parts, len(sent), len(want))
			return
		}
		if time.Now().After(deadline) {
			m.t.Fatalf("%s: %s (partitions %v):\n got %v\nwant %v", what, s.opts.HubID, parts, got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitCheckpointed waits until s's partition checkpoints hold everything
// the stream holds of the partitions it owns.
func waitCheckpointed(t *testing.T, s *Server) {
	t.Helper()
	waitUntil(t, s.opts.HubID+"'s partition checkpoints at the stream's end", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, p := range owned(s) {
			last, err := s.cl.Log().PartitionLastSeq(ctx, p)
			if err != nil {
				return false
			}
			if last == 0 {
				continue
			}
			rec, err := s.own.ckpts.Load(ctx, p)
			if err != nil || rec.Data == nil {
				return false
			}
			ck, err := decodePartCkpt(rec.Data)
			if err != nil || ck.pos < last {
				return false
			}
		}
		return true
	})
}

// TestClusterAttributesMove: attribute versions move with their
// partition between hubs. Hub a applies versions and events (some before,
// some after a version change, one late) of devices in several
// partitions; hub b joins and takes half the partitions by clean
// handovers (their checkpoints imported), then a is killed without a
// handover and b takes the rest from a's checkpoints, which hold
// versions b never read from the stream. On each hub, for the
// partitions it owns, group_by=attr.site equals the brute-force join: after the
// handover, after the crash, after events and a version applied past
// the checkpoint, after b's own checkpoint (whose compaction must leave
// the imported versions), after b restarts without a handover (its local
// log's ownership entries replayed) and after hubd rebuild.
func TestClusterAttributesMove(t *testing.T) {
	c := testnats.Start(t, 1)
	oa, _ := ownOptions(t, c, "hub-a")
	a, stopA := startClusterHub(t, oa)
	n := oa.NATS.Log.Partitions
	m := &attrMove{t: t, streams: map[string]wire.StreamID{}, next: map[string]uint64{}, base: time.Now().UTC().Truncate(time.Hour).Add(-2 * time.Hour)}
	parts := map[int]bool{}
	for i := range 12 {
		d := "pump-" + strconv.Itoa(i)
		m.devices = append(m.devices, d)
		m.streams[d], m.next[d] = wire.NewStreamID(), 1
		parts[natslog.PartitionOf(d, n)] = true
	}
	if len(parts) < 4 {
		t.Fatalf("the devices fall in %d partitions; the test needs several", len(parts))
	}
	waitUntil(t, "hub a owns every partition", func() bool { return len(owned(a)) == n })
	for i, d := range m.devices {
		m.version(a, d, "north", 0)
		m.events(a, d, time.Minute, 2*time.Minute)
		if i%2 == 0 {
			m.version(a, d, "south", 10*time.Minute) // the move
		}
		m.events(a, d, 11*time.Minute, 12*time.Minute)
		m.events(a, d, 9*time.Minute) // late, from before the move
	}
	m.check(a, "hub a alone")

	// A clean handover: b takes its share from a's final checkpoints.
	ob, _ := ownOptions(t, c, "hub-b")
	b, stopB := startClusterHub(t, ob)
	waitOwners(t, []*Server{a, b}, "a and b share the partitions")
	// A lease is owned before the task importing its checkpoint has run.
	waitUntil(t, "hub b imports a checkpoint", func() bool {
		return counterValue(t, b.own.m.takeovers.WithLabelValues("checkpoint")) > 0
	})
	if counterValue(t, b.own.m.takeovers.WithLabelValues("checkpoint")) == 0 {
		t.Fatal("hub b imported no checkpoint")
	}
	m.check(b, "after the handover")
	m.check(a, "after the handover")
	if got := a.attrs.Devices(); got >= len(m.devices) {
		t.Fatalf("hub a still holds versions of %d devices after handing half of its partitions over", got)
	}

	// Versions and events on both hubs' partitions, then a is killed
	// once its checkpoints hold them.
	for i, d := range m.devices {
		if i%3 == 0 {
			m.version(a, d, "east", 20*time.Minute)
		}
		m.events(a, d, 19*time.Minute, 21*time.Minute)
	}
	m.check(a, "before the crash")
	m.check(b, "before the crash")
	waitCheckpointed(t, a)
	before := counterValue(t, b.own.m.takeovers.WithLabelValues("checkpoint"))
	aParts := len(owned(a))
	stopA(true)
	waitUntil(t, "hub b owns every partition", func() bool { return len(owned(b)) == n })
	waitUntil(t, "hub b takes a's partitions from their checkpoints", func() bool {
		return counterValue(t, b.own.m.takeovers.WithLabelValues("checkpoint")) >= before+float64(aParts)
	})
	m.check(b, "after the crash")

	// Past the checkpoint: events on both sides of every version, one
	// more version; then b's own checkpoint compacts its table.
	for i, d := range m.devices {
		if i%4 == 1 {
			m.version(b, d, "west", 30*time.Minute)
		}
		m.events(b, d, 29*time.Minute, 31*time.Minute, 40*time.Minute)
	}
	m.check(b, "after the crash, events past the checkpoint")

	// b killed and restarted on its data directory before any checkpoint
	// of its own since its start: the local log's ownership entries, the
	// imports with their versions, are replayed.
	m.events(b, m.devices[0], 41*time.Minute)
	m.check(b, "before b's crash")
	held := b.attrs.Held()
	if held == 0 {
		t.Fatal("hub b holds no imported versions")
	}
	b.crashLeases = true
	stopB(true)
	ob2, _ := ownOptions(t, c, "hub-b")
	ob2.DataDir = ob.DataDir
	b2, stopB2 := startClusterHub(t, ob2)
	waitUntil(t, "the restarted hub b owns every partition", func() bool { return len(owned(b2)) == n })
	m.check(b2, "after b's restart")
	if n := counterValue(t, b2.own.m.takeovers.WithLabelValues("checkpoint")); n != 0 {
		t.Fatalf("the restarted hub b imported %v checkpoints; its own replayed state is at or past each", n)
	}
	if got := b2.attrs.Held(); got != held {
		t.Fatalf("after the replay %d devices are held, before the crash %d", got, held)
	}

	// b's own checkpoint compacts its table: the imported versions stay.
	if err := b2.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	m.check(b2, "after b's checkpoint")

	// hubd rebuild replays the same log, imports included.
	stopB2(false)
	orb, _ := ownOptions(t, c, "hub-b")
	orb.DataDir = ob.DataDir
	if _, err := Rebuild(context.Background(), orb); err != nil {
		t.Fatal(err)
	}
	ob3, _ := ownOptions(t, c, "hub-b")
	ob3.DataDir = ob.DataDir
	b3, _ := startClusterHub(t, ob3)
	waitUntil(t, "hub b after the rebuild owns every partition", func() bool { return len(owned(b3)) == n })
	m.check(b3, "after hubd rebuild")
}
