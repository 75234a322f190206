package natslog_test

import (
	"context"
	"fmt"
	"io"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"edgeflow/hub/natslog"
	"edgeflow/internal/testnats"
)

// BenchmarkSnapshot measures Put and Latest of 10 MB and 100 MB states on
// one server (R1) against the raw Object Store Put and Get of the same
// bytes, the baseline: the difference is the checksum, the pointer update
// and the pruning.
//
//	go test -run '^$' -bench 'BenchmarkSnapshot$' -benchtime 3x ./hub/natslog
func BenchmarkSnapshot(b *testing.B) { benchmarkSnapshot(b, 1) }

// BenchmarkSnapshotR3 is BenchmarkSnapshot on three servers, both buckets
// with three replicas.
func BenchmarkSnapshotR3(b *testing.B) { benchmarkSnapshot(b, 3) }

func benchmarkSnapshot(b *testing.B, servers int) {
	c := testnats.Start(b, servers)
	_, js := connect(b, c.URLs())
	s := openSnapshots(b, js, natslog.SnapshotOptions{Replicas: servers, MaxBytes: 128 << 20})
	ctx := context.Background()
	raw, err := js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: "RAW", Replicas: servers, Storage: jetstream.FileStorage, MaxBytes: 512 << 20})
	if err != nil {
		b.Fatal(err)
	}
	var gen uint64
	for _, size := range []int{10_000_000, 100_000_000} {
		state := randomState(int64(size), size)
		mb := fmt.Sprintf("%dMB", size/1_000_000)
		b.Run("Put/"+mb, func(b *testing.B) {
			b.SetBytes(int64(size))
			for i := 0; i < b.N; i++ {
				g, err := s.Put(ctx, natslog.Snapshot{State: state, Positions: map[int]uint64{0: uint64(i)}, Hub: "bench", Generation: gen})
				if err != nil {
					b.Fatal(err)
				}
				gen = g
			}
		})
		b.Run("Latest/"+mb, func(b *testing.B) {
			b.SetBytes(int64(size))
			for i := 0; i < b.N; i++ {
				got, err := s.Latest(ctx)
				if err != nil || len(got.State) != size {
					b.Fatalf("latest: %d bytes, %v", len(got.State), err)
				}
			}
		})
		b.Run("RawPut/"+mb, func(b *testing.B) {
			b.SetBytes(int64(size))
			for i := 0; i < b.N; i++ {
				if _, err := raw.PutBytes(ctx, "raw", state); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("RawGet/"+mb, func(b *testing.B) {
			b.SetBytes(int64(size))
			for i := 0; i < b.N; i++ {
				r, err := raw.Get(ctx, "raw")
				if err != nil {
					b.Fatal(err)
				}
				info, err := r.Info()
				if err != nil {
					b.Fatal(err)
				}
				got := make([]byte, info.Size)
				_, err = io.ReadFull(r, got)
				r.Close()
				if err != nil || len(got) != size {
					b.Fatalf("raw get: %d bytes, %v", len(got), err)
				}
			}
		})
	}
}
