//go:build linux

package hub

import (
	"encoding/binary"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/dgraph-io/badger/v4"
	"golang.org/x/sys/unix"

	"edgeflow/hub/hublog"
	"edgeflow/internal/cputime"
)

// Group commit shape of the end-to-end benchmark: about 48 batches of
// 1000 events a group, each a columnar frame of about 5 KB.
const (
	durableGroup = 48
	durableFrame = 5033
)

// BenchmarkDurableGroup measures what making one group of batches
// durable costs on this machine's disk, the hub's way and two raw ways,
// in one run so the ratios show (ms/group, and cpu-ms/group: the
// process's CPU, kernel included). hub-store: the hub's Badger store, with
// its options, takes the group's payloads and a small key a batch in one
// transaction, then Sync, as the committer does. mmap-msync: what Badger
// does underneath, the same bytes copied into a shared mapping of a
// sparse file, then msync. write-fdatasync: the same bytes appended with
// write(2), then fdatasync, the floor for a log file of its own.
//
//	go test ./hub -run '^$' -bench DurableGroup -benchtime 400x -count 3
func BenchmarkDurableGroup(b *testing.B) {
	frame := make([]byte, durableFrame)
	for i := range frame {
		frame[i] = byte(i*7 + i>>8) // not all zero: a file system may skip zero pages
	}
	b.Run("hub-store", func(b *testing.B) {
		st, err := hublog.OpenStore(b.TempDir(), true, slog.New(slog.DiscardHandler))
		if err != nil {
			b.Fatal(err)
		}
		defer st.Close()
		small := make([]byte, 16) // a dedup range's size
		n := uint64(0)
		durableLoop(b, func() {
			kvs := make([]kv, 0, 2*durableGroup) // Badger keeps keys and values until the commit
			for range durableGroup {
				n++
				kvs = append(kvs, kv{k: append(binary.BigEndian.AppendUint64(nil, n), 'p'), v: frame},
					kv{k: append(binary.BigEndian.AppendUint64(nil, n), 'r'), v: small})
			}
			err := st.DB.Update(func(txn *badger.Txn) error { return setAll(txn, kvs) })
			if err == nil {
				err = st.Flush()
			}
			if err != nil {
				b.Fatal(err)
			}
		})
	})
	b.Run("mmap-msync", func(b *testing.B) {
		// A fresh sparse file of this size whenever the last one is full,
		// as Badger starts a value log file (its own is 2 GiB).
		const size = 256 << 20
		var m []byte
		off := size
		defer func() { _ = syscall.Munmap(m) }()
		durableLoop(b, func() {
			if off+durableGroup*durableFrame > size {
				if m != nil {
					if err := syscall.Munmap(m); err != nil {
						b.Fatal(err)
					}
				}
				f := durableFile(b)
				if err := f.Truncate(size); err != nil {
					b.Fatal(err)
				}
				var err error
				if m, err = syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED); err != nil {
					b.Fatal(err)
				}
				off = 0
			}
			for range durableGroup {
				off += copy(m[off:], frame)
			}
			if err := unix.Msync(m, unix.MS_SYNC); err != nil {
				b.Fatal(err)
			}
		})
	})
	b.Run("write-fdatasync", func(b *testing.B) {
		f := durableFile(b)
		group := make([]byte, 0, durableGroup*durableFrame)
		for range durableGroup {
			group = append(group, frame...)
		}
		durableLoop(b, func() {
			if _, err := f.Write(group); err != nil {
				b.Fatal(err)
			}
			if err := unix.Fdatasync(int(f.Fd())); err != nil {
				b.Fatal(err)
			}
		})
	})
}

// durableFile creates a file in a temporary directory, closed and removed
// with it.
func durableFile(b *testing.B) *os.File {
	f, err := os.Create(filepath.Join(b.TempDir(), "log"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	return f
}

// durableLoop runs one group commit per iteration and reports its wall
// time and the process's CPU time a group.
func durableLoop(b *testing.B, commit func()) {
	b.SetBytes(durableGroup * durableFrame)
	cpu0 := cputime.Self()
	for b.Loop() {
		commit()
	}
	cpu := cputime.Self() - cpu0
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e6, "ms/group")
	b.ReportMetric(float64(cpu)/float64(b.N)/1e6, "cpu-ms/group")
	b.ReportMetric(0, "ns/op")
}
