package buffer

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// dirBytes sums the disk blocks allocated to the files in dir: what df
// sees. Badger preallocates memtable logs sparsely, so sizes would overstate.
func dirBytes(t testing.TB, dir string) int64 {
	var n int64
	filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return nil
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			n += st.Blocks * 512
		} else {
			n += fi.Size()
		}
		return nil
	})
	return n
}

// TestSpaceReclaimed cycles far more data than the bound through a stream,
// as a queue (append, read, ack) and as a ring buffer (drop_oldest with no
// acks), and checks that the directory stays bounded: acknowledged and
// dropped data really leaves the disk.
func TestSpaceReclaimed(t *testing.T) {
	if testing.Short() {
		t.Skip("long queue workload")
	}
	const bound = 4 << 20
	const total = 256 << 20 // 64x the bound
	for _, mode := range []string{"queue", "ring", "queue-big-records"} {
		t.Run(mode, func(t *testing.T) {
			// Blocks stay under ValueThreshold whatever the record size, so
			// compaction, not value-log GC, gives space back.
			rec := make([]byte, 200)
			if mode == "queue-big-records" {
				rec = make([]byte, 200<<10)
			}
			batch := make([][]byte, min(500, 100<<10/len(rec)+1))
			for i := range batch {
				batch[i] = rec
			}
			dir := t.TempDir()
			s := openTest(t, dir, Options{Profile: ProfileLowMemory, ValueLogFileSize: 4 << 20, MaintenanceInterval: 200 * time.Millisecond, Durability: DurabilityNone})
			st, _ := s.Stream("d", StreamOptions{MaxBytes: bound})
			ctx := context.Background()
			written, peak := 0, int64(0)
			for written < total {
				r, err := st.Append(ctx, batch)
				if err != nil {
					t.Fatal(err)
				}
				written += len(rec) * len(batch)
				if mode != "ring" && r.Last%10 == 0 {
					if err := st.Ack(r.Last); err != nil {
						t.Fatal(err)
					}
				}
				if written%(32<<20) < len(rec)*len(batch) {
					peak = max(peak, dirBytes(t, dir))
				}
			}
			s.Maintain()
			end := dirBytes(t, dir)
			if testing.Verbose() {
				ents, _ := os.ReadDir(dir)
				for _, e := range ents {
					fi, err := e.Info()
					if err != nil {
						continue
					}
					t.Logf("  %s %d (%d allocated)", e.Name(), fi.Size(), fi.Sys().(*syscall.Stat_t).Blocks*512)
				}
			}
			t.Logf("%s: wrote %d MiB through a %d MiB bound; dir %0.1f MiB at end, peak %0.1f MiB; dropped %d",
				mode, written>>20, bound>>20, float64(end)/(1<<20), float64(peak)/(1<<20), st.Stats().Dropped)
			// Fixed costs: memtable WAL files and one or two value-log files.
			if limit := int64(6*bound + 16<<20); end > limit || peak > 2*limit {
				t.Fatalf("space not reclaimed: end %d, peak %d bytes, limit %d", end, peak, limit)
			}
		})
	}
}
