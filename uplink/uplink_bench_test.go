package uplink

import (
	"testing"
	"time"

	"edgeflow/buffer"
	"edgeflow/internal/cputime"
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

// BenchmarkDrain measures the agent's work per event while it drains a
// backlog, without a broker: read a quarter of a window of 32 batches of
// 1000 events in one pass (as the uplink does while draining), encode them,
// then ack them in the buffer, as if the hub had answered. The buffer is
// filled 1000 events per append, as the end-to-end benchmark fills it, and
// syncs as an agent's does by default; its blocks are s2 (the uplink
// decodes and encodes each batch) or columns (the agent's default: each
// block goes as stored). One op is one event.
//
//	go test -run '^$' -bench BenchmarkDrain -benchtime 2000000x ./uplink/
func BenchmarkDrain(b *testing.B) {
	for _, c := range []buffer.BlockCompression{buffer.CompressS2, buffer.CompressColumns} {
		b.Run("buffer="+string(c), func(b *testing.B) { benchDrain(b, c) })
	}
}

func benchDrain(b *testing.B, blocks buffer.BlockCompression) {
	const size, window = 1000, 32
	n := max(b.N, size) / size * size
	dir := b.TempDir()
	open := func() (*buffer.Store, *buffer.Stream) {
		s, err := buffer.Open(dir, buffer.Options{Logger: quietLogger(), BlockCompression: blocks})
		if err != nil {
			b.Fatal(err)
		}
		st, err := s.Stream("dev-bench", buffer.StreamOptions{MaxBytes: 1 << 30})
		if err != nil {
			b.Fatal(err)
		}
		return s, st
	}
	// Filled, closed and opened again, and Badger's compactions of the
	// filling left to finish, so the timer sees the drain only.
	s, st := open()
	appendEvents(b, st, n, size)
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	s, st = open()
	defer s.Close()
	settleCPU()
	u := newUplink(b, st, "tcp://127.0.0.1:1", func(o *Options) {
		o.MaxBatchEvents, o.Window = size, window
		o.Logger = quietLogger()
	})
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cputime.Self()
	for u.next <= uint64(n) {
		fs, err := u.readBatches(time.Now(), window/4)
		if err != nil || len(fs) == 0 {
			b.Fatalf("read batches from %d: %d, %v", u.next, len(fs), err)
		}
		if err := st.Ack(fs[len(fs)-1].last); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	cpu := cputime.Self() - cpu0
	if got := st.Stats().Acked; got != uint64(n) {
		b.Fatalf("acked %d of %d", got, n)
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(n), "cpu-ns/event")
}

// settleCPU waits (at most 30 s) until the process has been nearly idle
// for half a second: Badger's background flushes and compactions of what
// a benchmark's setup wrote are done.
func settleCPU() {
	quiet := 0
	for deadline := time.Now().Add(30 * time.Second); quiet < 5 && time.Now().Before(deadline); {
		c := cputime.Self()
		time.Sleep(100 * time.Millisecond)
		if cputime.Self()-c < 5*time.Millisecond {
			quiet++
		} else {
			quiet = 0
		}
	}
}
