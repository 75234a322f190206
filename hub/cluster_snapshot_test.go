package hub

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"edgeflow/hub/cluster"
	"edgeflow/hub/natslog"
	"edgeflow/internal/testnats"
)

// TestClusterRestoreFromSnapshot: a hub stores a state snapshot, the
// stream then drops (purges, standing in for retention) every message up
// to the snapshot's lowest position; a hub on an empty data directory
// restores the snapshot and reads the rest: every event once, every
// window equal to the brute-force answer, every device listed, and a
// resent batch the snapshot covers is a duplicate. A hub on an empty data
// directory without the snapshot misses the purged events.
func TestClusterRestoreFromSnapshot(t *testing.T) { testClusterRestore(t, false) }

// TestClusterRestoreFallback: the latest snapshot's object is overwritten;
// the restoring hub falls back to the generation before it and reads the
// stream after that one's positions: still every event once.
func TestClusterRestoreFallback(t *testing.T) { testClusterRestore(t, true) }

func testClusterRestore(t *testing.T, corruptLatest bool) {
	c := testnats.Start(t, 1)
	o, cc := clusterOptions(t, t.TempDir(), c, 1)
	s, stop := startClusterHub(t, o)
	ids := []string{"dev-1", "dev-2", "site.3", "dev-4", "dev-5"}
	agents := startClusterAgents(t, c, ids, 40)
	base := time.Now().Add(-2 * time.Hour).Truncate(time.Hour)
	ctx := context.Background()
	phase := func(n int, what string) {
		t.Helper()
		for _, a := range agents {
			a.appendEvents(t, base, n)
		}
		waitAcked(t, agents, what)
		waitAllApplied(t, cc, agents, what)
		checkExactlyOnce(t, cc, agents, what)
	}
	phase(300, "before the snapshot")
	waitUntil(t, "the snapshot store open", func() bool { return s.cl.snap.store.Load() != nil })
	if err := s.snapshotNow(ctx); err != nil {
		t.Fatal(err)
	}
	snapPos := maps.Clone(s.cl.snap.lastPosSeen())
	if len(snapPos) == 0 {
		t.Fatal("the snapshot holds no positions")
	}
	phase(200, "after the first snapshot")
	if corruptLatest {
		if err := s.snapshotNow(ctx); err != nil {
			t.Fatal(err)
		}
		if maps.Equal(snapPos, s.cl.snap.lastPosSeen()) {
			t.Fatal("the second snapshot has the first one's positions")
		}
		phase(100, "after the second snapshot")
	}
	js := c.JetStream(t)
	// A batch the snapshot covers, resent later by its device.
	stream, err := js.Stream(ctx, natslog.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	stop(true)
	total := 0
	for _, a := range agents {
		total += a.next
	}

	if corruptLatest {
		obs, err := js.ObjectStore(ctx, natslog.DefaultSnapshotBucket)
		if err != nil {
			t.Fatal(err)
		}
		list, err := obs.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, info := range list {
			names = append(names, info.Name)
		}
		slices.Sort(names)
		last := names[len(names)-1]
		orig, err := obs.GetBytes(ctx, last)
		if err != nil {
			t.Fatal(err)
		}
		orig[len(orig)/2] ^= 0xff
		if _, err := obs.PutBytes(ctx, last, orig); err != nil {
			t.Fatal(err)
		}
	}

	low := purgeBelowSnapshot(ctx, t, stream, snapPos)
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.FirstSeq != low+1 {
		t.Fatalf("after the purge the stream starts at %d, want %d (lowest position %d)", info.State.FirstSeq, low+1, low)
	}

	o2, cc2 := clusterOptions(t, t.TempDir(), c, 1)
	s2, stop2 := startClusterHub(t, o2)
	if !maps.Equal(s2.cl.from, snapPos) {
		t.Fatalf("restored hub resumes after %v, want the snapshot's positions %v", s2.cl.from, snapPos)
	}
	if corruptLatest && counterValue(t, s2.clm.Snap.Restores.WithLabelValues("fallback")) != 1 {
		t.Fatal("the restore did not count a fallback")
	}
	// The device resends a batch the snapshot covers: a duplicate.
	tok := strings.SplitN(first.Subject, ".", 4)[3]
	if _, err := js.Publish(ctx, "edge.v1."+tok+".batch", first.Data); err != nil {
		t.Fatal(err)
	}
	for _, a := range agents {
		a.appendEvents(t, base, 50)
	}
	total += 50 * len(agents)
	waitAcked(t, agents, "after the restore")
	waitAllApplied(t, cc2, agents, "after the restore")
	waitUntil(t, "the resent batch decided", func() bool {
		f, err := s2.cl.Log().Fullness(ctx)
		if err != nil {
			return false
		}
		cur := s2.cl.snap.lastAppliedMax(s2)
		return cur >= f.LastSeq
	})
	checkExactlyOnce(t, cc2, agents, "after the restore")
	checkClusterState(t, s2, agents, base, "after the restore")
	// Partitions without a position may have lost messages (the stream
	// starts after 1); those with one lost none.
	var want []int
	for p := range o2.NATS.Log.Partitions {
		if _, ok := snapPos[p]; !ok {
			want = append(want, p)
		}
	}
	waitUntil(t, "the restored positions checked", func() bool {
		return counterValue(t, s2.clm.Snap.Gaps) == float64(len(want))
	})
	if got := cluster.RestoreGaps(snapPos, o2.NATS.Log.Partitions, low+1); !slices.Equal(got, want) {
		t.Fatalf("gaps %v, want %v", got, want)
	}
	stop2(false)

	// Without the snapshot a hub on an empty data directory reads only
	// what the stream still holds.
	if err := js.DeleteKeyValue(ctx, natslog.DefaultSnapshotBucket+"_HEAD"); err != nil {
		t.Fatal(err)
	}
	o3, cc3 := clusterOptions(t, t.TempDir(), c, 1)
	s3, _ := startClusterHub(t, o3)
	waitUntil(t, "the stream read to its end without the snapshot", func() bool {
		f, err := s3.cl.Log().Fullness(ctx)
		return err == nil && s3.cl.snap.lastAppliedMax(s3) >= f.LastSeq
	})
	cc3.mu.Lock()
	var got uint64
	for _, st := range cc3.Streams {
		got += st.Events
	}
	cc3.mu.Unlock()
	if got >= uint64(total) {
		t.Fatalf("without the snapshot a hub applied %d of %d events: the purge dropped nothing the test relies on", got, total)
	}
	t.Logf("without the snapshot: %d of %d events applied; with it all (%s)", got, total, fmt.Sprint(len(snapPos), " partitions restored"))
}

// lastAppliedMax is the highest stream sequence the applier applied, read
// on the applier.
func (cs *clusterSnap) lastAppliedMax(s *Server) uint64 {
	var m uint64
	_ = s.inApplier(func() error {
		for _, seq := range cs.applied {
			m = max(m, seq)
		}
		return nil
	})
	return m
}

// TestClusterRestoreUnderLoad: snapshots taken while agents keep sending
// (the applier between groups, the committer ahead of it) claim only what
// their state holds: after a purge up to the last snapshot's lowest
// position, a hub restored from it on an empty data directory applies
// every event once.
func TestClusterRestoreUnderLoad(t *testing.T) {
	c := testnats.Start(t, 1)
	o, cc := clusterOptions(t, t.TempDir(), c, 1)
	s, stop := startClusterHub(t, o)
	ids := []string{"dev-1", "dev-2", "site.3", "dev-4", "dev-5", "dev-6"}
	agents := startClusterAgents(t, c, ids, 20)
	base := time.Now().Add(-2 * time.Hour).Truncate(time.Hour)
	ctx := context.Background()
	waitUntil(t, "the snapshot store open", func() bool { return s.cl.snap.store.Load() != nil })
	halt := make(chan struct{})
	done := produce(t, agents, base, 30, 5*time.Millisecond, halt)
	var snapPos map[int]uint64
	for i := 0; i < 5; i++ {
		time.Sleep(100 * time.Millisecond)
		if err := s.snapshotNow(ctx); err != nil {
			t.Fatal(err)
		}
		snapPos = maps.Clone(s.cl.snap.lastPosSeen())
	}
	close(halt)
	<-done
	waitAcked(t, agents, "under load")
	waitAllApplied(t, cc, agents, "under load")
	checkExactlyOnce(t, cc, agents, "under load")
	stop(true)

	js := c.JetStream(t)
	stream, err := js.Stream(ctx, natslog.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	low := purgeBelowSnapshot(ctx, t, stream, snapPos)
	o2, cc2 := clusterOptions(t, t.TempDir(), c, 1)
	s2, _ := startClusterHub(t, o2)
	if !maps.Equal(s2.cl.from, snapPos) {
		t.Fatalf("restored hub resumes after %v, want %v", s2.cl.from, snapPos)
	}
	waitAllApplied(t, cc2, agents, "after the restore")
	checkExactlyOnce(t, cc2, agents, "after the restore")
	checkClusterState(t, s2, agents, base, "after the restore")
	t.Logf("purged up to %d; %d events per device", low, agents[0].next)
}

// TestClusterStaleDataDir: a hub restarted on its data directory after
// the stream dropped messages beyond its committed positions (down longer
// than the retention) says so and counts each partition it held a
// position of, and starts.
func TestClusterStaleDataDir(t *testing.T) {
	c := testnats.Start(t, 1)
	dir := t.TempDir()
	o, cc := clusterOptions(t, dir, c, 1)
	s, stop := startClusterHub(t, o)
	agents := startClusterAgents(t, c, []string{"dev-1", "dev-2", "dev-3"}, 40)
	base := time.Now().Add(-2 * time.Hour).Truncate(time.Hour)
	for _, a := range agents {
		a.appendEvents(t, base, 100)
	}
	waitAcked(t, agents, "first run")
	waitAllApplied(t, cc, agents, "first run")
	var held int
	_ = s.inApplier(func() error { held = len(s.cl.snap.applied); return nil })
	stop(true)
	for _, a := range agents {
		a.cancel()
		<-a.done
	}
	js := c.JetStream(t)
	ctx := context.Background()
	stream, err := js.Stream(ctx, natslog.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	// Messages the hub never read, then dropped.
	if _, err := js.Publish(ctx, "edge.v1.dev-1.batch", []byte("x")); err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Purge(ctx, jetstream.WithPurgeSequence(info.State.LastSeq+1)); err != nil {
		t.Fatal(err)
	}
	o2, _ := clusterOptions(t, dir, c, 1)
	s2, _ := startClusterHub(t, o2)
	waitUntil(t, "the stale positions counted", func() bool { return counterValue(t, s2.clm.Snap.Gaps) == float64(held) })
}

// TestClusterRestoreInterrupted: a restore that stops after writing the
// partials and the checkpoint, before the applied ranges and positions,
// leaves a directory the next start restores again: every event once.
func TestClusterRestoreInterrupted(t *testing.T) {
	c := testnats.Start(t, 1)
	o, cc := clusterOptions(t, t.TempDir(), c, 1)
	s, stop := startClusterHub(t, o)
	agents := startClusterAgents(t, c, []string{"dev-1", "dev-2", "dev-3"}, 40)
	base := time.Now().Add(-2 * time.Hour).Truncate(time.Hour)
	for _, a := range agents {
		a.appendEvents(t, base, 200)
	}
	waitAcked(t, agents, "first run")
	waitAllApplied(t, cc, agents, "first run")
	waitUntil(t, "the snapshot store open", func() bool { return s.cl.snap.store.Load() != nil })
	if err := s.snapshotNow(context.Background()); err != nil {
		t.Fatal(err)
	}
	stop(true)

	dir := t.TempDir()
	o2, _ := clusterOptions(t, dir, c, 1)
	s2, err := New(o2)
	if err != nil {
		t.Fatal(err)
	}
	s2.cl.snap.failAfterCheckpoint = true
	if err := s2.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "stopped after the checkpoint") {
		t.Fatalf("interrupted restore: %v", err)
	}
	s2.skipFinalCheckpoint = true
	_ = s2.Shutdown(context.Background())

	o3, cc3 := clusterOptions(t, dir, c, 1)
	s3, _ := startClusterHub(t, o3)
	if s3.cl.snap.restoredGen == 0 {
		t.Fatal("the second start did not restore the snapshot")
	}
	waitAllApplied(t, cc3, agents, "after the second start")
	checkExactlyOnce(t, cc3, agents, "after the second start")
	checkClusterState(t, s3, agents, base, "after the second start")
}

// TestClusterSnapshotConflict: another writer's snapshot makes the hub's
// next Put a conflict (logged, counted); the hub reads the head again and
// its following snapshot is stored on top of the other writer's.
func TestClusterSnapshotConflict(t *testing.T) {
	c := testnats.Start(t, 1)
	o, cc := clusterOptions(t, t.TempDir(), c, 1)
	s, _ := startClusterHub(t, o)
	agents := startClusterAgents(t, c, []string{"dev-1", "dev-2"}, 40)
	base := time.Now().Add(-2 * time.Hour).Truncate(time.Hour)
	ctx := context.Background()
	send := func(what string) {
		for _, a := range agents {
			a.appendEvents(t, base, 50)
		}
		waitAcked(t, agents, what)
		waitAllApplied(t, cc, agents, what)
	}
	send("first")
	waitUntil(t, "the snapshot store open", func() bool { return s.cl.snap.store.Load() != nil })
	if err := s.snapshotNow(ctx); err != nil {
		t.Fatal(err)
	}
	js := c.JetStream(t)
	other, err := natslog.OpenSnapshots(ctx, js, natslog.SnapshotOptions{Replicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Put(ctx, natslog.Snapshot{Positions: map[int]uint64{0: 1}, State: []byte("other"), Hub: "other", Generation: 1}); err != nil {
		t.Fatal(err)
	}
	send("second")
	if err := s.snapshotNow(ctx); !errors.Is(err, natslog.ErrSnapshotConflict) {
		t.Fatalf("Put after another writer's: %v", err)
	}
	if counterValue(t, s.clm.Snap.Uploads.WithLabelValues("conflict")) != 1 {
		t.Fatal("conflict not counted")
	}
	if err := s.snapshotNow(ctx); err != nil {
		t.Fatal(err)
	}
	latest, err := other.Latest(ctx)
	if err != nil || latest.Generation != 3 || latest.Hub == "other" {
		t.Fatalf("latest after the hub's retry: generation %d by %q, %v", latest.Generation, latest.Hub, err)
	}

	// A second hub shares the stream: neither stores a whole-state
	// snapshot (each holds only its partitions; their checkpoints hold
	// the state), so they never race for the pointer; alone again, the
	// first stores them again.
	o2, _ := clusterOptions(t, t.TempDir(), c, 1)
	s2, stop2 := startClusterHub(t, o2)
	waitUntil(t, "both hubs see each other", func() bool { return s.otherHubs() == 1 && s2.otherHubs() == 1 })
	// Nothing is sent meanwhile: the counting consumer is the first hub's,
	// and the second may own the agents' partitions now.
	for _, h := range []*Server{s, s2} {
		waitUntil(t, "the snapshot store open", func() bool { return h.cl.snap.store.Load() != nil })
		if err := h.snapshotNow(ctx); err != nil {
			t.Fatalf("snapshot with another hub sharing the stream: %v", err)
		}
		if counterValue(t, h.clm.Snap.Uploads.WithLabelValues("shared")) != 1 || counterValue(t, h.clm.Snap.Uploads.WithLabelValues("conflict")) > 1 {
			t.Fatal("a hub sharing the stream stored a snapshot, or conflicted")
		}
	}
	if g, err := other.HeadGeneration(ctx); err != nil || g != 3 {
		t.Fatalf("head generation %d (%v) after snapshots while shared, want 3", g, err)
	}
	stop2(false)
	waitUntil(t, "the first hub alone again", func() bool { return s.otherHubs() == 0 })
	send("fourth")
	if err := s.snapshotNow(ctx); err != nil {
		t.Fatal(err)
	}
	if g, err := other.HeadGeneration(ctx); err != nil || g != 4 {
		t.Fatalf("head generation %d (%v) alone again, want 4", g, err)
	}
}

// purgeBelowSnapshot stands in for retention: it drops every message of
// the stream up to the snapshot's lowest position, which the snapshot's
// state holds, and returns that position.
func purgeBelowSnapshot(ctx context.Context, t *testing.T, stream jetstream.Stream, snapPos map[int]uint64) uint64 {
	t.Helper()
	low := uint64(0)
	for _, seq := range snapPos {
		if low == 0 || seq < low {
			low = seq
		}
	}
	if err := stream.Purge(ctx, jetstream.WithPurgeSequence(low+1)); err != nil {
		t.Fatal(err)
	}
	return low
}
