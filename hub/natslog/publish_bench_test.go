package natslog_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"edgeflow/hub/natslog"
)

// benchPayload is the size of one benchmark batch, about what an agent
// sends for a hundred events in the columnar codec.
const benchPayload = 2048

// BenchmarkPublish measures publish-to-acknowledgement throughput into the
// log's stream on one server (R1) and on three (R3), each two ways in the
// same run: Log.Publish waiting for every acknowledgement before the next
// message ("sync", one writer's latency bound), and JetStream's raw
// asynchronous publish with up to 256 acknowledgements outstanding
// ("async", the rate the stream itself sustains).
func BenchmarkPublish(b *testing.B) {
	for _, size := range []int{1, 3} {
		_, js, l := startLog(b, size, natslog.Options{Replicas: size, Partitions: 64, MaxBytes: 2 << 30})
		s, err := js.Stream(context.Background(), natslog.DefaultStream)
		if err != nil {
			b.Fatal(err)
		}
		payload := make([]byte, benchPayload)
		b.Run(fmt.Sprintf("R%d/sync", size), func(b *testing.B) {
			purge(b, s)
			ctx := context.Background()
			b.SetBytes(benchPayload)
			b.ResetTimer()
			for i := range b.N {
				if _, err := l.Publish(ctx, fmt.Sprintf("dev-%d", i%1000), payload); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
		b.Run(fmt.Sprintf("R%d/async", size), func(b *testing.B) {
			purge(b, s)
			b.SetBytes(benchPayload)
			b.ResetTimer()
			asyncPublish(b, js, b.N, payload)
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// asyncPublish publishes n messages with up to 256 unacknowledged and
// waits until all are acknowledged, failing on any refusal.
func asyncPublish(b *testing.B, js jetstream.JetStream, n int, payload []byte) {
	futures := make([]jetstream.PubAckFuture, 0, 256)
	drain := func() {
		for _, f := range futures {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				b.Fatalf("async publish: %v", err)
			}
		}
		futures = futures[:0]
	}
	for i := range n {
		f, err := js.PublishAsync(natslog.BatchSubject(fmt.Sprintf("dev-%d", i%1000)), payload)
		if err != nil {
			b.Fatal(err)
		}
		if futures = append(futures, f); len(futures) == cap(futures) {
			drain()
		}
	}
	drain()
}

func purge(b *testing.B, s jetstream.Stream) {
	b.Helper()
	if err := s.Purge(context.Background()); err != nil {
		b.Fatal(err)
	}
}
