package buffer

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// fakeDisk is an injectable Options.FreeSpace whose answer the test sets.
type fakeDisk struct{ free atomic.Int64 }

func (f *fakeDisk) space(string) (int64, error) { return f.free.Load(), nil }

const testReserve = 1 << 20

func openGuarded(t *testing.T, disk *fakeDisk, logs *bytes.Buffer) *Store {
	t.Helper()
	o := Options{Profile: ProfileLowMemory, Durability: DurabilityNone, DiskReserve: testReserve, FreeSpace: disk.space,
		MaintenanceInterval: time.Hour}
	if logs != nil {
		o.Logger = slog.New(slog.NewTextHandler(logs, nil))
	}
	return openTest(t, t.TempDir(), o)
}

// TestDiskGuardBound checks the free-space bound per full policy: above the
// reserve appends go through, below it Reject refuses with an error that is
// both ErrFull and ErrDiskFull, DropOldest keeps the stream from growing by
// dropping its oldest events as a disk_full gap, and below three quarters
// of the reserve every policy refuses.
func TestDiskGuardBound(t *testing.T) {
	ctx := context.Background()
	t.Run("reject", func(t *testing.T) {
		disk := &fakeDisk{}
		disk.free.Store(64 << 20)
		var logs bytes.Buffer
		s := openGuarded(t, disk, &logs)
		st, _ := s.Stream("d", StreamOptions{Full: Reject})
		if _, err := st.Append(ctx, recs(1, 100)); err != nil {
			t.Fatal(err)
		}
		disk.free.Store(testReserve - 1000)
		_, err := st.Append(ctx, recs(101, 100))
		var dfe *DiskFullError
		if !errors.Is(err, ErrFull) || !errors.Is(err, ErrDiskFull) || !errors.As(err, &dfe) || dfe.Reserve != testReserve {
			t.Fatalf("append below the reserve: %v", err)
		}
		ds := s.DiskStatus()
		if !ds.Enabled || !ds.Limited || ds.RefusedAppends != 1 || ds.FreeBytes != testReserve-1000 {
			t.Fatalf("status while limited: %+v", ds)
		}
		if _, err := st.Append(ctx, recs(101, 100)); !errors.Is(err, ErrDiskFull) {
			t.Fatalf("second append below the reserve: %v", err)
		}
		if n := strings.Count(logs.String(), "disk space low"); n != 1 {
			t.Fatalf("want one log line as the limit starts, got %d:\n%s", n, logs.String())
		}
		disk.free.Store(64 << 20)
		if r, err := st.Append(ctx, recs(101, 100)); err != nil || r != (Range{101, 200}) {
			t.Fatalf("append after space came back: %v %v", r, err)
		}
		if ds := s.DiskStatus(); ds.Limited || ds.RefusedAppends != 2 {
			t.Fatalf("status after recovery: %+v", ds)
		}
		if !strings.Contains(logs.String(), "disk space recovered") {
			t.Fatalf("no recovery line:\n%s", logs.String())
		}
		if got := st.Stats(); got.Depth != 200 || got.Dropped != 0 {
			t.Fatalf("stats: %+v", got)
		}
	})
	t.Run("drop_oldest", func(t *testing.T) {
		disk := &fakeDisk{}
		disk.free.Store(64 << 20)
		s := openGuarded(t, disk, nil)
		st, _ := s.Stream("d", StreamOptions{Full: DropOldest})
		for i := range 10 {
			if _, err := st.Append(ctx, recs(1+100*i, 100)); err != nil {
				t.Fatal(err)
			}
		}
		before := st.Stats()
		disk.free.Store(testReserve - 1000) // below the reserve, above 3/4 of it
		r, err := st.Append(ctx, recs(1001, 100))
		if err != nil || r != (Range{1001, 1100}) {
			t.Fatalf("drop_oldest append below the reserve: %v %v", r, err)
		}
		after := st.Stats()
		gaps := st.Gaps()
		if after.Dropped < 100 || after.Bytes > before.Bytes || len(gaps) != 1 || gaps[0].Reason != ReasonDiskFull || gaps[0].First != 1 {
			t.Fatalf("want the oldest events dropped as a disk_full gap and no growth: before %+v after %+v gaps %+v", before, after, gaps)
		}
		if ds := s.DiskStatus(); ds.DroppedAppends != 1 || ds.RefusedAppends != 0 {
			t.Fatalf("status: %+v", ds)
		}
		disk.free.Store(testReserve / 2)
		if _, err := st.Append(ctx, recs(1101, 100)); !errors.Is(err, ErrDiskFull) {
			t.Fatalf("drop_oldest append below 3/4 of the reserve: %v", err)
		}
	})
	t.Run("block", func(t *testing.T) {
		disk := &fakeDisk{}
		disk.free.Store(64 << 20)
		s := openGuarded(t, disk, nil)
		st, _ := s.Stream("d", StreamOptions{Full: Block})
		disk.free.Store(testReserve / 2)
		short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		if _, err := st.Append(short, recs(1, 10)); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("block append without space: %v", err)
		}
		done := make(chan error, 1)
		go func() {
			_, err := st.Append(ctx, recs(1, 10))
			done <- err
		}()
		disk.free.Store(64 << 20)
		if err := <-done; err != nil {
			t.Fatalf("block append once space came back: %v", err)
		}
	})
	t.Run("off", func(t *testing.T) {
		disk := &fakeDisk{} // no space at all, but the guard is off
		s := openTest(t, t.TempDir(), Options{DiskReserve: -1, FreeSpace: disk.space})
		st, _ := s.Stream("d", StreamOptions{Full: Reject})
		if _, err := st.Append(ctx, recs(1, 10)); err != nil {
			t.Fatal(err)
		}
		if ds := s.DiskStatus(); ds.Enabled || ds.Limited {
			t.Fatalf("status with the guard off: %+v", ds)
		}
	})
}

// TestDiskGuardOpen checks that a store whose write-ahead log needs more
// space to open than the filesystem has is refused with an error naming the
// directory and the free space, and opens once there is space.
func TestDiskGuardOpen(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir, Options{DiskReserve: -1})
	st, _ := s.Stream("d", StreamOptions{})
	if _, err := st.Append(context.Background(), recs(1, 1000)); err != nil {
		t.Fatal(err)
	}
	// Copy the open store's directory, as a crash would leave it: its
	// memtable log still holds the events.
	crashed := t.TempDir()
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.Name() == "LOCK" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(crashed, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	disk := &fakeDisk{}
	disk.free.Store(64 << 10)
	_, err := Open(crashed, Options{FreeSpace: disk.space, Logger: quietLogger()})
	if !errors.Is(err, ErrDiskFull) || errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), crashed) || !strings.Contains(err.Error(), "64 KiB free") {
		t.Fatalf("open with no space: %v", err)
	}
	disk.free.Store(1 << 30) // the copy allocated the whole memtable log, sparse in the original
	s2 := openTest(t, crashed, Options{FreeSpace: disk.space})
	st2, _ := s2.Stream("d", StreamOptions{})
	if got := st2.Stats(); got.Depth != 1000 {
		t.Fatalf("reopened: %+v", got)
	}
}

// TestDiskGuardReclaim checks that while the disk is short of space, a
// maintenance pass compacts an emptied stream's blocks off the disk, and
// that the stream carries on afterwards (and after a reopen) where it was.
func TestDiskGuardReclaim(t *testing.T) {
	disk := &fakeDisk{}
	disk.free.Store(1 << 40)
	dir := t.TempDir()
	o := Options{Profile: ProfileLowMemory, Durability: DurabilityNone, DiskReserve: testReserve, FreeSpace: disk.space,
		MaintenanceInterval: time.Hour, Logger: quietLogger()}
	s, err := Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := s.Stream("d", StreamOptions{})
	ctx := context.Background()
	batch := benchBatch(1000)
	var r Range
	for range 60 {
		if r, err = st.Append(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Ack(r.Last); err != nil {
		t.Fatal(err)
	}
	s.Maintain() // not limited: no reclaim
	if ds := s.DiskStatus(); ds.Reclaims != 0 {
		t.Fatalf("reclaimed without need: %+v", ds)
	}
	before := dirBytes(t, dir)
	disk.free.Store(testReserve / 2)
	s.Maintain()
	after := dirBytes(t, dir)
	if ds := s.DiskStatus(); ds.Reclaims != 1 {
		t.Fatalf("no reclaim while limited: %+v", ds)
	}
	t.Logf("directory %d bytes before the reclaim, %d after", before, after)
	if after >= before-int64(len(batch)*benchEventBytes) {
		t.Fatalf("reclaim freed too little: %d bytes before, %d after", before, after)
	}
	s.Maintain() // nothing freed since: no second pass
	if ds := s.DiskStatus(); ds.Reclaims != 1 {
		t.Fatalf("second reclaim with nothing new: %+v", ds)
	}
	disk.free.Store(1 << 40)
	if r2, err := st.Append(ctx, recs(1, 10)); err != nil || r2.First != r.Last+1 {
		t.Fatalf("append after reclaim: %v %v", r2, err)
	}
	// A marker that a crash between writing it and the drop left behind
	// is no block: loading the stream removes it.
	if err := s.db.Update(func(txn *badger.Txn) error { return txn.Set(reclaimKey(st.num), nil) }); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, dir, o)
	st, err = s.Stream("d", StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := st.ReadFrom(0, 100, 1<<20)
	if err != nil || len(got) != 10 || got[0].Seq != r.Last+1 || string(got[9].Data) != "event-00000010" {
		t.Fatalf("read after reopen: %d records, %v", len(got), err)
	}
	if stats := st.Stats(); stats.Depth != 10 || stats.Next != r.Last+11 {
		t.Fatalf("stats after reopen: %+v", stats)
	}
}
