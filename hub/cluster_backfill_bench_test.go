package hub

import (
	"context"
	"fmt"
	"testing"
	"time"

	"edgeflow/internal/testnats"
)

// BenchmarkClusterBackfill measures how long a hub restored from a state
// snapshot takes to backfill its local log from the stream: 1,000,000
// events of 20 devices in batches of 500 or 20, all before the snapshot,
// one NATS server. Timed from the restored hub's start until it no longer
// says it is backfilling; the figures are seconds per million events and
// backfilled entries (batches) per second.
//
//	go test -run '^$' -bench BenchmarkClusterBackfill -benchtime 1x ./hub
func BenchmarkClusterBackfill(b *testing.B) {
	for _, batch := range []int{500, 20} {
		b.Run(fmt.Sprintf("batch%d", batch), func(b *testing.B) { benchClusterBackfill(b, batch) })
	}
}

func benchClusterBackfill(b *testing.B, batch int) {
	const devices, events = 20, 50_000
	var took time.Duration
	var entries float64
	for range b.N {
		c := testnats.Start(b, 1)
		o, cc := clusterOptions(b, b.TempDir(), c, 1)
		s, stop := startClusterHub(b, o)
		ids := make([]string, devices)
		for i := range ids {
			ids[i] = fmt.Sprintf("bench-%02d", i)
		}
		agents := startClusterAgents(b, c, ids, batch)
		base := time.Now().Add(-2 * time.Hour).Truncate(time.Hour)
		for _, a := range agents {
			a.appendEvents(b, base, events)
		}
		waitAcked(b, agents, "bench load")
		waitAllApplied(b, cc, agents, "bench load")
		waitStore(b, s)
		if err := s.snapshotNow(context.Background()); err != nil {
			b.Fatal(err)
		}
		stop(false)

		o2, _ := clusterOptions(b, b.TempDir(), c, 1)
		start := time.Now()
		s2, stop2 := startClusterHub(b, o2)
		for deadline := time.Now().Add(10 * clusterWithin); ; time.Sleep(5 * time.Millisecond) {
			if running, _ := s2.backfillState(); !running {
				break
			}
			if time.Now().After(deadline) {
				b.Fatal("backfill not done")
			}
		}
		took += time.Since(start)
		entries += counterValue(b, s2.cl.bf.m.entries)
		stop2(false)
	}
	mev := float64(devices*events) / 1e6
	b.ReportMetric(took.Seconds()/float64(b.N)/mev, "s/Mevents")
	b.ReportMetric(entries/took.Seconds(), "entries/s")
}

// waitStore waits until the hub's snapshot store is open.
func waitStore(b *testing.B, s *Server) {
	for deadline := time.Now().Add(clusterWithin); s.cl.snap.store.Load() == nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatal("snapshot store not open")
		}
	}
}
