package hub

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"edgeflow/aggregate"
	"edgeflow/hub/lease"
	"edgeflow/hub/natslog"
	"edgeflow/internal/testnats"
)

// ownOptions are clusterOptions for one of several hubs sharing the
// stream: its own data directory and hub id, a 2s lease TTL and frequent
// partition checkpoints.
func ownOptions(t testing.TB, c *testnats.Cluster, id string) (Options, *countingConsumer) {
	o, cc := clusterOptions(t, t.TempDir(), c, 1)
	o.HubID = id
	o.NATS.LeaseTTL = 2 * time.Second
	o.NATS.CheckpointEvery = 20
	o.NATS.CheckpointInterval = 300 * time.Millisecond
	return o, cc
}

// owned lists the partitions s's lease manager says it owns.
func owned(s *Server) []int {
	var out []int
	for p := range s.opts.NATS.Log.Partitions {
		if _, ok := s.LeaseManager().Owns(p); ok {
			out = append(out, p)
		}
	}
	return out
}

// deviceCounts is each device's event count in s's engine (every 1m
// window around base, grouped by device), the state it holds whatever it
// owns: asked of the engine, since any hub's HTTP answer covers the whole
// fleet and a local one only the partitions it owns now.
func deviceCounts(t *testing.T, s *Server, base time.Time) map[string]uint64 {
	t.Helper()
	res, err := s.agg.eng.Query(aggregate.Query{Metric: "temp", Window: aggregate.WindowSpec{Kind: aggregate.Tumbling, Size: time.Minute},
		From: base.Add(-time.Hour), To: base.Add(time.Hour), GroupBy: []string{"device"}, Aggs: aggregate.AggCount})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, w := range res {
		out[w.Group["device"]] += w.Count
	}
	return out
}

// waitUnion waits until the hubs' engines together count every event the
// agents sent exactly once: per device, the sum over the hubs equals what
// it sent (a device counted by two hubs, or an event applied twice, never
// gets there). On timeout it names the devices that differ.
func waitUnion(t *testing.T, hubs []*Server, agents []*clusterAgent, base time.Time, what string) {
	t.Helper()
	deadline := time.Now().Add(clusterWithin)
	for {
		sum := map[string]uint64{}
		holders := map[string][]int{}
		for i, s := range hubs {
			for dev, n := range deviceCounts(t, s, base) {
				sum[dev] += n
				holders[dev] = append(holders[dev], i)
			}
		}
		var diff []string
		for _, a := range agents {
			if sum[a.id] != uint64(a.next) || len(holders[a.id]) != 1 {
				diff = append(diff, fmt.Sprintf("%s: %d counted (by hubs %v), %d sent", a.id, sum[a.id], holders[a.id], a.next))
			}
		}
		if len(diff) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: after %v: %v", what, clusterWithin, diff)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitOwners waits until the hubs together own every partition, each
// once, and each hub some; it returns how long that took.
func waitOwners(t *testing.T, hubs []*Server, what string) time.Duration {
	t.Helper()
	start := time.Now()
	waitUntil(t, what, func() bool {
		n := 0
		for _, s := range hubs {
			o := owned(s)
			if len(o) == 0 {
				return false
			}
			n += len(o)
		}
		return n == hubs[0].opts.NATS.Log.Partitions
	})
	return time.Since(start)
}

// TestClusterHubsShareTakeOver runs hubs sharing one stream's 8
// partitions under leases (2s TTL), each with its own Badger directory,
// while 12 agents send through NATS: the union of the hubs' engines
// counts every event exactly once after a second hub joins (clean
// handoffs), after a hub is stopped as if it crashed (its leases left to
// expire: the survivor takes its partitions from their checkpoints and
// the stream), after the crashed hub restarts on its data directory and
// after it stops cleanly (its partitions handed back).
func TestClusterHubsShareTakeOver(t *testing.T) {
	rounds := 1
	if v := os.Getenv("EDGEFLOW_OWN_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("EDGEFLOW_OWN_ROUNDS=%q: want a positive count", v)
		}
		rounds = n
	}
	c := testnats.Start(t, 1)
	oa, _ := ownOptions(t, c, "hub-a")
	a, stopA := startClusterHub(t, oa)
	agents, base := startNumberedAgents(t, c, 12)
	ob, _ := ownOptions(t, c, "hub-b")
	b, stopB := startClusterHub(t, ob)
	t.Logf("two hubs own every partition %v after b started: a %v, b %v", waitOwners(t, []*Server{a, b}, "a and b share the partitions"), owned(a), owned(b))
	waitAcked(t, agents, "two hubs")
	waitUnion(t, []*Server{a, b}, agents, base, "two hubs")
	// Each is ready: the partitions the other owns do not hold it back.
	waitUntil(t, "both hubs ready", func() bool { return a.NotReadyReason() == "" && b.NotReadyReason() == "" })
	// A third hub with a live hub's id is refused.
	od, _ := ownOptions(t, c, "hub-a")
	dup, err := New(od)
	if err != nil {
		t.Fatal(err)
	}
	if err := dup.Start(context.Background()); !errors.Is(err, lease.ErrDuplicateHub) {
		t.Fatalf("a hub started with a live hub's id: %v, want lease.ErrDuplicateHub", err)
	}
	_ = dup.Shutdown(context.Background())

	live := []*Server{a, b}
	stops := []func(bool){stopA, stopB}
	for round := range rounds {
		// Crash the first live hub while the agents keep sending.
		stop := make(chan struct{})
		done := produce(t, agents, base, 5, 30*time.Millisecond, stop)
		time.Sleep(300 * time.Millisecond)
		victim, survivor := live[0], live[1]
		victimParts := owned(victim)
		killed := time.Now()
		victim.crashLeases = true
		stops[0](true)
		waitUntil(t, "the survivor owns every partition", func() bool { return len(owned(survivor)) == survivor.opts.NATS.Log.Partitions })
		t.Logf("round %d: %s's partitions %v taken over by %s %v after the crash", round, victim.opts.HubID, victimParts, survivor.opts.HubID,
			time.Since(killed).Round(time.Millisecond))
		close(stop)
		<-done
		waitAcked(t, agents, "after the crash")
		waitUnion(t, []*Server{survivor}, agents, base, fmt.Sprintf("round %d: after the crash", round))

		// The crashed hub restarts on its data directory: partitions move
		// back to it by clean handoffs, each with a checkpoint ahead of
		// the state it recovered (dropped, then the checkpoint imported),
		// and what it recovered of the partitions it does not get back is
		// dropped once their owner's checkpoint passes it.
		oc, _ := ownOptions(t, c, victim.opts.HubID)
		oc.DataDir = victim.opts.DataDir
		nc, stopC := startClusterHub(t, oc)
		stop = make(chan struct{})
		done = produce(t, agents, base, 5, 30*time.Millisecond, stop)
		t.Logf("round %d: %s restarted, partitions shared after %v", round, oc.HubID, waitOwners(t, []*Server{survivor, nc}, "the new hub takes its share"))
		close(stop)
		<-done
		waitAcked(t, agents, "after the restart")
		waitUnion(t, []*Server{survivor, nc}, agents, base, fmt.Sprintf("round %d: after the restart", round))
		if counterValue(t, nc.own.m.takeovers.WithLabelValues("checkpoint")) == 0 {
			t.Fatalf("round %d: the restarted hub imported no checkpoint", round)
		}
		live, stops = []*Server{survivor, nc}, []func(bool){stops[1], stopC}
	}

	// A clean stop hands every partition of the last hub to the other.
	keep, last := live[0], live[1]
	stop := make(chan struct{})
	done := produce(t, agents, base, 5, 30*time.Millisecond, stop)
	time.Sleep(200 * time.Millisecond)
	stopped := time.Now()
	lastParts := owned(last)
	stops[1](false)
	waitUntil(t, "the remaining hub owns every partition", func() bool { return len(owned(keep)) == keep.opts.NATS.Log.Partitions })
	t.Logf("clean stop: every partition owned by %s %v after", keep.opts.HubID, time.Since(stopped).Round(time.Millisecond))
	close(stop)
	<-done
	waitAcked(t, agents, "after the clean stop")
	waitUnion(t, []*Server{keep}, agents, base, "after the clean stop")
	if counterValue(t, keep.own.m.saves.WithLabelValues("ok")) == 0 {
		t.Fatal("no partition checkpoint was saved")
	}
	// The handed-over checkpoints name the stopped hub as a holder of
	// those partitions' history (its log holds the events it applied).
	for _, p := range lastParts {
		if h := keep.HistoryHolders(p); !slices.Contains(h, last.opts.HubID) {
			t.Fatalf("partition %d handed over by %s: history holders %v", p, last.opts.HubID, h)
		}
	}
}

// TestClusterFencedHubDrops fences a hub off one of its partitions (a
// newer epoch claims the partition's checkpoint, as a new owner does): its
// next save is refused, and it drops the partition's devices and applies
// none of their later batches, while its other partitions go on.
func TestClusterFencedHubDrops(t *testing.T) {
	c := testnats.Start(t, 1)
	o, cc := ownOptions(t, c, "hub-f")
	s, _ := startClusterHub(t, o)
	ids := []string{"dev-1", "dev-2", "dev-3", "dev-4", "dev-5", "dev-6"}
	agents := startClusterAgents(t, c, ids, 20)
	base := time.Now().Add(-2 * time.Hour).Truncate(time.Hour)
	for _, ag := range agents {
		ag.appendEvents(t, base, 50)
	}
	waitAcked(t, agents, "before the fence")
	waitUnion(t, []*Server{s}, agents, base, "before the fence")

	n := s.opts.NATS.Log.Partitions
	p := natslog.PartitionOf("dev-1", n)
	epoch, ok := s.LeaseManager().Owns(p)
	if !ok {
		t.Fatalf("the hub does not own partition %d", p)
	}
	js := c.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ck, err := natslog.OpenPartitionCheckpoints(ctx, js, natslog.PartitionCheckpointOptions{Bucket: "EDGEFLOW_PARTITION_CHECKPOINTS", Replicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := ck.Claim(ctx, p, epoch+1000); err != nil {
		t.Fatal(err)
	}
	var fenced, others []*clusterAgent
	for _, ag := range agents {
		if natslog.PartitionOf(ag.id, n) == p {
			fenced = append(fenced, ag)
		} else {
			others = append(others, ag)
		}
	}
	before := map[string]uint64{}
	for _, ag := range fenced {
		before[ag.id] = uint64(ag.next)
	}
	for _, ag := range agents {
		ag.appendEvents(t, base, 30)
	}
	waitUntil(t, "the fenced partition dropped", func() bool {
		return counterValue(t, s.own.m.saves.WithLabelValues("fenced")) > 0 && counterValue(t, s.own.m.drops.WithLabelValues("fenced")) > 0
	})
	waitAcked(t, others, "the other partitions")
	waitUnion(t, []*Server{s}, others, base, "the other partitions after the fence")
	counts := deviceCounts(t, s, base)
	for _, ag := range fenced {
		if counts[ag.id] != 0 {
			t.Fatalf("fenced device %s still counted: %d events", ag.id, counts[ag.id])
		}
	}
	if pos := s.AppliedPositions(); slices.Contains(mapsKeys(pos), p) {
		t.Fatalf("the fenced partition %d still has an applied position: %v", p, pos)
	}
	// Batches of the fenced partition sent after the drop are neither
	// applied nor acknowledged here (the owner of the newer epoch would).
	for _, ag := range fenced {
		ag.appendEvents(t, base, 10)
	}
	time.Sleep(time.Second)
	cc.mu.Lock()
	for k, st := range cc.Streams {
		for _, ag := range fenced {
			if len(k) > len(ag.id) && k[:len(ag.id)+1] == ag.id+"/" && st.Events > before[ag.id]+30 {
				cc.mu.Unlock()
				t.Fatalf("fenced device %s: %d events applied, at most %d were sent before the drop", ag.id, st.Events, before[ag.id]+30)
			}
		}
	}
	cc.mu.Unlock()
	for _, ag := range fenced {
		if acked := ag.st.Stats().Acked; acked >= uint64(ag.next) {
			t.Fatalf("fenced device %s: all %d events acknowledged, though no hub applies its partition", ag.id, ag.next)
		}
	}
	if counts := deviceCounts(t, s, base); counts["dev-1"] != 0 {
		t.Fatalf("fenced device dev-1 counted again: %d", counts["dev-1"])
	}
}

// TestClusterCheckpointTooLarge: a hub whose partitions' state does not
// fit a checkpoint counts each refused save (nothing is stored); when a
// second hub joins, the partitions handed to it are read from the
// stream's start, and the two hubs still count every event once.
func TestClusterCheckpointTooLarge(t *testing.T) {
	c := testnats.Start(t, 1)
	oa, _ := ownOptions(t, c, "hub-small")
	a, err := New(oa)
	if err != nil {
		t.Fatal(err)
	}
	a.own.ckptMax = 64 // below any partition's state
	ctx, cancel := context.WithTimeout(context.Background(), clusterWithin)
	defer cancel()
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Shutdown(context.Background()) })
	agents, base := startNumberedAgents(t, c, 8)
	waitAcked(t, agents, "one hub")
	waitUntil(t, "a refused save", func() bool { return counterValue(t, a.own.m.saves.WithLabelValues("too_large")) > 0 })
	if n := counterValue(t, a.own.m.saves.WithLabelValues("ok")); n != 0 {
		t.Fatalf("%v checkpoints saved though none fits", n)
	}
	ob, _ := ownOptions(t, c, "hub-big")
	b, _ := startClusterHub(t, ob)
	waitOwners(t, []*Server{a, b}, "the second hub takes its share")
	for _, ag := range agents {
		ag.appendEvents(t, base, 50)
	}
	waitAcked(t, agents, "two hubs")
	waitUnion(t, []*Server{a, b}, agents, base, "two hubs")
	if n := counterValue(t, b.own.m.takeovers.WithLabelValues("stream")); n == 0 {
		t.Fatal("the second hub took no partition from the stream's start")
	}
	if n := counterValue(t, b.own.m.takeovers.WithLabelValues("checkpoint")); n != 0 {
		t.Fatalf("the second hub imported %v checkpoints, though none was stored", n)
	}
}

// forgetPartitionCheckpoints deletes the partition checkpoint bucket, as
// on a stream no hub ever saved one of.
func forgetPartitionCheckpoints(t *testing.T, c *testnats.Cluster) {
	t.Helper()
	js := c.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := js.DeleteKeyValue(ctx, natslog.DefaultPartitionCheckpointBucket); err != nil {
		t.Fatal(err)
	}
}

func mapsKeys(m map[int]uint64) []int {
	var out []int
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestClusterImportReplayed: a hub that took its partitions from another
// hub's checkpoints, applied more and crashed (no local or partition
// checkpoint since) recovers by replaying its log, the imports included,
// and resumes from its own state, further than the checkpoints: every
// event counted once.
func TestClusterImportReplayed(t *testing.T) {
	c := testnats.Start(t, 1)
	ox, _ := ownOptions(t, c, "hub-x")
	_, stopX := startClusterHub(t, ox)
	agents, base := startNumberedAgents(t, c, 6)
	waitAcked(t, agents, "hub x")
	stopX(false) // hands every partition over with a checkpoint

	oy, _ := ownOptions(t, c, "hub-y")
	oy.NATS.CheckpointEvery, oy.NATS.CheckpointInterval = 1<<30, time.Hour // none after the import
	dir := oy.DataDir
	y, stopY := startClusterHub(t, oy)
	waitUnion(t, []*Server{y}, agents, base, "hub y after the import")
	if n := counterValue(t, y.own.m.takeovers.WithLabelValues("checkpoint")); n == 0 {
		t.Fatal("hub y imported no checkpoint")
	}
	for _, ag := range agents {
		ag.appendEvents(t, base, 50)
	}
	waitAcked(t, agents, "hub y")
	waitUnion(t, []*Server{y}, agents, base, "hub y")
	y.crashLeases = true
	stopY(true)

	oy2, _ := ownOptions(t, c, "hub-y")
	oy2.DataDir = dir
	y2, _ := startClusterHub(t, oy2)
	waitUnion(t, []*Server{y2}, agents, base, "hub y restarted, replayed")
	waitUntil(t, "the restarted hub owns every partition", func() bool { return len(owned(y2)) == oy2.NATS.Log.Partitions })
	waitUnion(t, []*Server{y2}, agents, base, "hub y restarted")
	if n := counterValue(t, y2.own.m.takeovers.WithLabelValues("local")); n == 0 {
		t.Fatal("the restarted hub did not resume from its own state")
	}
	for _, ag := range agents {
		ag.appendEvents(t, base, 30)
	}
	waitAcked(t, agents, "hub y restarted")
	waitUnion(t, []*Server{y2}, agents, base, "hub y restarted, more events")

	// hubd rebuild replays the same log, the imports included, into the
	// same engine state.
	y2.crashLeases = false
	if err := y2.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	or, _ := ownOptions(t, c, "hub-y")
	or.DataDir = dir
	res, err := Rebuild(context.Background(), or)
	if err != nil {
		t.Fatal(err)
	}
	if !res.FromLog && res.Events == 0 {
		t.Fatalf("the rebuild replayed nothing: %+v", res)
	}
	oy3, _ := ownOptions(t, c, "hub-y")
	oy3.DataDir = dir
	y3, _ := startClusterHub(t, oy3)
	waitUnion(t, []*Server{y3}, agents, base, "hub y after a rebuild")
}

// startNumberedAgents runs agents dev-0..dev-(n-1) (batches of up to 20
// events) and has each append 100 events from base, two hours ago.
func startNumberedAgents(t *testing.T, c *testnats.Cluster, n int) ([]*clusterAgent, time.Time) {
	t.Helper()
	var ids []string
	for i := range n {
		ids = append(ids, "dev-"+strconv.Itoa(i))
	}
	agents := startClusterAgents(t, c, ids, 20)
	base := time.Now().Add(-2 * time.Hour).Truncate(time.Hour)
	for _, ag := range agents {
		ag.appendEvents(t, base, 100)
	}
	return agents, base
}
