package hub

import (
	"testing"
	"time"

	"edgeflow/internal/testnats"
)

// BenchmarkClusterIngest measures events per second from agents' buffers
// to the hub's acks in cluster mode: 20 devices, each with 5,000 events
// already buffered, drain through NATS' MQTT listener, the stream and the
// hub (with the event-time engine) until every event is acknowledged.
// One round per b.N, timed from every agent connected (one event each
// acknowledged) to the last ack; the figure is events/s over the drain.
//
//	go test -run '^$' -bench BenchmarkClusterIngest -benchtime 1x ./hub
func BenchmarkClusterIngest(b *testing.B) {
	for _, size := range []int{1, 3} {
		b.Run(map[int]string{1: "R1", 3: "R3"}[size], func(b *testing.B) {
			benchClusterIngest(b, size)
		})
	}
}

func benchClusterIngest(b *testing.B, size int) {
	const devices, events = 20, 5000
	var total time.Duration
	for range b.N {
		tb := b
		c := testnats.Start(tb, size)
		o, cc := clusterOptions(tb, b.TempDir(), c, size)
		startClusterHub(tb, o)
		ids := make([]string, devices)
		for i := range ids {
			ids[i] = "bench-" + string(rune('a'+i))
		}
		agents := startClusterAgents(tb, c, ids, 500)
		base := time.Now().Add(-2 * time.Hour).Truncate(time.Hour)
		// One event each first, so the clock starts with every agent
		// connected and subscribed.
		for _, a := range agents {
			a.appendEvents(tb, base, 1)
		}
		waitAcked(tb, agents, "bench warm-up")
		start := time.Now()
		for _, a := range agents {
			a.appendEvents(tb, base, events)
		}
		waitAcked(tb, agents, "bench")
		total += time.Since(start)
		waitAllApplied(tb, cc, agents, "bench")
		checkExactlyOnce(tb, cc, agents, "bench")
	}
	b.ReportMetric(float64(devices*events*b.N)/total.Seconds(), "events/s")
}
