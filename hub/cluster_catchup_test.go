package hub

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"edgeflow/internal/testnats"
)

// gatedConsumer is a countingConsumer whose Apply waits until open is
// closed, which holds the hub's applier back.
type gatedConsumer struct {
	*countingConsumer
	open chan struct{}
}

func (g *gatedConsumer) Apply(b *AppliedBatch) {
	<-g.open
	g.countingConsumer.Apply(b)
}

// TestClusterReadyzCatchingUp: a hub restored on an empty data directory
// from a snapshot taken before the stream's last batches answers /readyz
// 503 "catching up with the stream: N partitions behind" while its
// applier is held back, and 200 only once it has applied every event the
// stream held at its start, which the counter verifies at that moment.
func TestClusterReadyzCatchingUp(t *testing.T) {
	c := testnats.Start(t, 1)
	o, cc := clusterOptions(t, t.TempDir(), c, 1)
	s, stop := startClusterHub(t, o)
	agents := startClusterAgents(t, c, []string{"dev-1", "dev-2", "site.3", "dev-4"}, 10)
	base := time.Now().Add(-2 * time.Hour).Truncate(time.Hour)
	phase := func(n int, what string) {
		t.Helper()
		for _, a := range agents {
			a.appendEvents(t, base, n)
		}
		waitAcked(t, agents, what)
		waitAllApplied(t, cc, agents, what)
	}
	phase(100, "before the snapshot")
	waitUntil(t, "the snapshot store open", func() bool { return s.cl.snap.store.Load() != nil })
	if err := s.snapshotNow(context.Background()); err != nil {
		t.Fatal(err)
	}
	phase(200, "after the snapshot")
	var want uint64
	for _, a := range agents {
		want += uint64(a.next)
	}
	stop(false)
	// The stop handed every partition over with a checkpoint newer than
	// the snapshot, which the next hub would import: without them it
	// restores the snapshot and reads the stream after it.
	forgetPartitionCheckpoints(t, c)

	o2, cc2 := clusterOptions(t, t.TempDir(), c, 1)
	g := &gatedConsumer{countingConsumer: cc2, open: make(chan struct{})}
	o2.Consumers = []Consumer{g}
	s2, _ := startClusterHub(t, o2)
	var release sync.Once
	openGate := func() { release.Do(func() { close(g.open) }) }
	t.Cleanup(openGate) // runs before the hub's stop: a failed check does not leave its applier held
	var body string
	waitUntil(t, "/readyz 503 naming the partitions behind while the applier is held", func() bool {
		code, b := getJSON(t, s2.Handler(), "/readyz", nil)
		body = string(b)
		return code == 503 && strings.Contains(body, "catching up with the stream") && strings.Contains(body, "partitions behind")
	})
	t.Logf("/readyz while held: %s", strings.TrimSpace(body))
	if got := appliedEvents(cc2); got >= want {
		t.Fatalf("the restored hub applied %d of %d events before its applier was released", got, want)
	}
	openGate()
	waitUntil(t, "/readyz 200 once caught up", func() bool { code, _ := getJSON(t, s2.Handler(), "/readyz", nil); return code == 200 })
	if got := appliedEvents(cc2); got != want {
		t.Fatalf("/readyz 200 with %d of %d events applied", got, want)
	}
	if _, target, done := s2.cl.CatchUp.Status(); !done || len(target) != o2.NATS.Log.Partitions {
		t.Fatalf("catch-up status: done %v, %d targets", done, len(target))
	}
	checkExactlyOnce(t, cc2, agents, "after the catch-up")
}
