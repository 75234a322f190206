package uplink

import (
	"testing"
	"time"
)

// BenchmarkUplinkThroughput measures events/s from a pre-filled buffer,
// in batches of 1000 events of about 40 bytes, through a real Mosquitto on
// loopback to the test responder (which decodes every batch with
// wire.DecodeBatch and answers it). One op is one event.
//
//	go test -run '^$' -bench BenchmarkUplinkThroughput -benchtime 1000000x ./uplink/
func BenchmarkUplinkThroughput(b *testing.B) {
	m := newMosquitto(b)
	_, st := openStream(b, "dev-bench")
	r := newResponder(b, m.URL(), nil)
	r.light = true
	appendEvents(b, st, b.N, 10_000)
	u := newUplink(b, st, m.URL(), func(o *Options) {
		o.MaxBatchEvents = 1000
		o.Window = 16
		o.AckTimeout = 30 * time.Second
		o.Logger = quietLogger()
	})
	want := uint64(b.N)
	b.ResetTimer()
	start := time.Now()
	stop := runUplink(b, u)
	for st.Stats().Acked < want {
		time.Sleep(200 * time.Microsecond)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	stop()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
	b.ReportMetric(value(u.m.BytesSent)/float64(b.N), "wire-B/event")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkReadBatch measures the agent's work per batch without a broker:
// read 1000 events from a buffer filled 1000 at a time (2000 blocks, read
// round and round) and build the framed batch. One op is one batch.
//
//	go test -run '^$' -bench BenchmarkReadBatch ./uplink/
func BenchmarkReadBatch(b *testing.B) {
	const blocks, size = 2000, 1000
	_, st := openStream(b, "dev-bench")
	appendEvents(b, st, blocks*size, size)
	u := newUplink(b, st, "tcp://127.0.0.1:1", func(o *Options) {
		o.MaxBatchEvents = size
		o.Logger = quietLogger()
	})
	u.next = 1
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		f, err := u.readBatch(time.Now())
		if err != nil || f == nil || f.events() != size {
			b.Fatalf("read batch from %d: %v %v", u.next, f, err)
		}
		if u.next > blocks*size {
			u.next = 1
		}
	}
	b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "events/s")
}
