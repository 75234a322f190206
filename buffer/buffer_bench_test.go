package buffer

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"

	"edgeflow/internal/cputime"
)

// benchEventBytes is the size of one benchmark event, about what a small
// encoded sensor reading takes.
const benchEventBytes = 40

func benchBatch(n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = make([]byte, benchEventBytes)
		copy(out[i], fmt.Sprintf("temp,room=%d value=21.5 %d", i%16, i))
	}
	return out
}

// BenchmarkAppend measures Append of 40-byte events at batch sizes 1, 100
// and 1000 in each durability mode, single appender, acking as it goes so
// the stream stays a queue.
func BenchmarkAppend(b *testing.B) {
	for _, d := range []Durability{DurabilitySync, DurabilityInterval, DurabilityNone} {
		for _, n := range []int{1, 100, 1000} {
			b.Run(fmt.Sprintf("mode=%s/batch=%d", d, n), func(b *testing.B) {
				s := openTest(b, b.TempDir(), Options{Durability: d})
				b.SetBytes(int64(n * benchEventBytes))
				appendQueue(b, s, benchBatch(n))
				b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "events/s")
			})
		}
	}
}

// BenchmarkAppendEvents measures Append of 1000 encoded sensor readings at
// a time (interval durability, as the agent runs) in each block form: what
// the columns cost at append time, where the agent now encodes what its
// uplink used to encode at send time. cpu-ns/event includes the committer
// and Badger's background work.
//
//	go test ./buffer -run '^$' -bench AppendEvents -benchtime 2000x -count 3
func BenchmarkAppendEvents(b *testing.B) {
	for _, c := range []BlockCompression{CompressS2, CompressColumns} {
		b.Run("blocks="+string(c), func(b *testing.B) {
			s := openTest(b, b.TempDir(), Options{BlockCompression: c})
			cpu0 := cputime.Self()
			appendQueue(b, s, eventBatch(1000))
			cpu := cputime.Self() - cpu0
			b.ReportMetric(float64(b.N*1000)/b.Elapsed().Seconds(), "events/s")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*1000), "cpu-ns/event")
		})
	}
}

// appendQueue appends batch b.N times to a new stream of s, timed, acking
// as it goes so the stream stays a queue.
func appendQueue(b *testing.B, s *Store, batch [][]byte) {
	st, _ := s.Stream("bench", StreamOptions{MaxBytes: 1 << 30})
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r, err := st.Append(ctx, batch)
		if err != nil {
			b.Fatal(err)
		}
		if i%64 == 63 {
			st.Ack(r.Last)
		}
	}
	b.StopTimer()
}

// BenchmarkRawBadger writes the same bytes straight to Badger with a
// WriteBatch per append (one key holding the batch's events back to back,
// the same layout the buffer uses), with the same Badger options and an
// fsync per write in sync mode: the ceiling the buffer is measured against.
func BenchmarkRawBadger(b *testing.B) {
	for _, d := range []Durability{DurabilitySync, DurabilityInterval, DurabilityNone} {
		for _, n := range []int{1, 100, 1000} {
			b.Run(fmt.Sprintf("mode=%s/batch=%d", d, n), func(b *testing.B) {
				o := Options{Durability: d, Logger: quietLogger()}
				o.EnsureDefaults()
				db, err := badger.Open(badgerOptions(b.TempDir(), o))
				if err != nil {
					b.Fatal(err)
				}
				defer db.Close()
				var val []byte
				for _, e := range benchBatch(n) {
					val = append(val, e...)
				}
				b.SetBytes(int64(n * benchEventBytes))
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					wb := db.NewWriteBatch()
					key := binary.BigEndian.AppendUint64([]byte("k"), uint64(i))
					if err := wb.Set(key, val); err != nil {
						b.Fatal(err)
					}
					if err := wb.Flush(); err != nil {
						b.Fatal(err)
					}
					if d == DurabilitySync {
						if err := db.Sync(); err != nil {
							b.Fatal(err)
						}
					}
				}
				b.StopTimer()
				b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "events/s")
			})
		}
	}
}

// BenchmarkScanTail measures the uplink's steady state, append one event,
// scan it, ack it, with the tail cache on and off, on one stream and
// round-robin over 1,000 streams of one store (the fleet simulator's
// shape). scan-ns/op is the Scan alone; hits/op the share of scans the
// cache answered.
func BenchmarkScanTail(b *testing.B) {
	for _, streams := range []int{1, 1000} {
		for _, cache := range []int64{0, -1} {
			name := fmt.Sprintf("streams=%d/cache=on", streams)
			if cache < 0 {
				name = fmt.Sprintf("streams=%d/cache=off", streams)
			}
			b.Run(name, func(b *testing.B) {
				s := openTest(b, b.TempDir(), Options{Durability: DurabilityNone, TailCacheBytes: cache})
				sts := make([]*Stream, streams)
				for i := range sts {
					var err error
					if sts[i], err = s.Stream(fmt.Sprintf("dev-%d", i), StreamOptions{}); err != nil {
						b.Fatal(err)
					}
				}
				batch := benchBatch(1)
				ctx := context.Background()
				var scanNs time.Duration
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					st := sts[i%streams]
					r, err := st.Append(ctx, batch)
					if err != nil {
						b.Fatal(err)
					}
					t0 := time.Now()
					n, err := st.Scan(r.First, 1000, 1<<20, func(uint64, []byte) bool { return true })
					scanNs += time.Since(t0)
					if err != nil || n != 1 {
						b.Fatalf("scan of %v: %d records, %v", r, n, err)
					}
					if err := st.Ack(r.Last); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				tc := s.TailCacheStats()
				b.ReportMetric(float64(scanNs.Nanoseconds())/float64(b.N), "scan-ns/op")
				b.ReportMetric(float64(tc.Hits)/float64(b.N), "hits/op")
			})
		}
	}
}

// BenchmarkAckHerd measures what fleetsim's shared store does at the end
// of a mass reconnect: 2,000 streams of 180 one-event blocks each (one
// block per commit, as a device at 1 event/s writes them), then every
// stream acks all of its blocks at once. It reports the time the acks took
// (360,000 Badger deletes), during which the store's appends wait. One op
// is one herd.
//
//	go test ./buffer -run '^$' -bench AckHerd -benchtime 1x
func BenchmarkAckHerd(b *testing.B) {
	const streams, blocks = 2000, 180
	ctx := context.Background()
	var took time.Duration
	for range b.N {
		b.StopTimer()
		s := openTest(b, b.TempDir(), Options{Durability: DurabilityNone})
		sts := make([]*Stream, streams)
		for i := range sts {
			st, err := s.Stream(fmt.Sprint("d", i), StreamOptions{})
			if err != nil {
				b.Fatal(err)
			}
			sts[i] = st
		}
		// Each round appends one record to every stream concurrently: the
		// committer groups them, so every stream gets one block a round.
		each := func(fn func(st *Stream) error) {
			var wg sync.WaitGroup
			errs := make(chan error, streams)
			for _, st := range sts {
				wg.Go(func() {
					if err := fn(st); err != nil {
						errs <- err
					}
				})
			}
			wg.Wait()
			close(errs)
			if err := <-errs; err != nil {
				b.Fatal(err)
			}
		}
		rec := make([]byte, 45)
		for range blocks {
			each(func(st *Stream) error { _, err := st.Append(ctx, [][]byte{rec}); return err })
		}
		b.StartTimer()
		start := time.Now()
		each(func(st *Stream) error { return st.Ack(blocks) })
		took += time.Since(start)
		b.StopTimer()
		for _, st := range sts {
			if got := st.Stats().Acked; got != blocks {
				b.Fatalf("stream %s acked %d of %d", st.Name(), got, blocks)
			}
		}
		s.Close()
	}
	b.ReportMetric(took.Seconds()/float64(b.N), "s/herd")
	b.ReportMetric(float64(b.N*streams*blocks)/took.Seconds(), "deletes/s")
}
