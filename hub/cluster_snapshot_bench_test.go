package hub

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"edgeflow/hub/natslog"
	"edgeflow/internal/testnats"
)

// BenchmarkClusterRestore measures how long a hub on an empty data
// directory takes to hold the state of 1,000,000 logged events (20
// devices, batches of 500 or of 20 events, the event-time engine on, one
// NATS server):
// from a state snapshot (restore, then nothing left to read) and from the
// stream's start (every batch read and applied again). Each is timed from
// New to every event applied; the figures are seconds per million events.
//
//	go test -run '^$' -bench BenchmarkClusterRestore -benchtime 1x ./hub
func BenchmarkClusterRestore(b *testing.B) {
	for _, batch := range []int{500, 20} {
		b.Run(fmt.Sprintf("batch%d", batch), func(b *testing.B) { benchClusterRestore(b, batch) })
	}
}

func benchClusterRestore(b *testing.B, batch int) {
	const devices, events = 20, 50_000
	var fromSnap, fromStream time.Duration
	var snapBytes float64
	var pause time.Duration
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
		for deadline := time.Now().Add(clusterWithin); s.cl.snap.store.Load() == nil; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				b.Fatal("snapshot store not open")
			}
		}
		if err := s.snapshotNow(context.Background()); err != nil {
			b.Fatal(err)
		}
		snapBytes = gaugeValue(b, s.clm.Snap.Bytes)
		pause += s.cl.snap.lastPause
		stop(false)

		fromSnap += timeRestore(b, c, agents)
		nc, err := nats.Connect(c.URLs())
		if err != nil {
			b.Fatal(err)
		}
		js, _ := jetstream.New(nc)
		if err := js.DeleteKeyValue(context.Background(), natslog.DefaultSnapshotBucket+"_HEAD"); err != nil {
			b.Fatal(err)
		}
		nc.Close()
		fromStream += timeRestore(b, c, agents)
	}
	mev := float64(devices*events) / 1e6
	b.ReportMetric(fromSnap.Seconds()/float64(b.N)/mev, "s/Mevents-snapshot")
	b.ReportMetric(fromStream.Seconds()/float64(b.N)/mev, "s/Mevents-stream")
	b.ReportMetric(snapBytes, "snapshot-bytes")
	b.ReportMetric(float64(pause.Milliseconds())/float64(b.N), "ms-applier-pause")
}

// timeRestore starts a hub on an empty data directory and returns the
// time from New until it has applied every event the agents sent.
func timeRestore(b *testing.B, c *testnats.Cluster, agents []*clusterAgent) time.Duration {
	o, cc := clusterOptions(b, b.TempDir(), c, 1)
	start := time.Now()
	_, stop := startClusterHub(b, o)
	waitAllApplied(b, cc, agents, "bench restore")
	took := time.Since(start)
	checkExactlyOnce(b, cc, agents, "bench restore")
	stop(false)
	return took
}
