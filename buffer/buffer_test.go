package buffer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"
)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func openTest(t testing.TB, dir string, o Options) *Store {
	t.Helper()
	if o.Logger == nil {
		o.Logger = quietLogger()
	}
	s, err := Open(dir, o)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func recs(from, n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = []byte(fmt.Sprintf("event-%08d", from+i))
	}
	return out
}

func TestAppendReadAckReopen(t *testing.T) {
	for _, d := range []Durability{DurabilitySync, DurabilityInterval, DurabilityNone} {
		t.Run(string(d), func(t *testing.T) {
			dir := t.TempDir()
			s := openTest(t, dir, Options{Durability: d})
			st, err := s.Stream("dev-1", StreamOptions{})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			r, err := st.Append(ctx, recs(1, 10))
			if err != nil || r != (Range{1, 10}) {
				t.Fatalf("append: %v %v", r, err)
			}
			r, err = st.Append(ctx, recs(11, 5), AppendOptions{WaitDurable: true})
			if err != nil || r != (Range{11, 15}) {
				t.Fatalf("append: %v %v", r, err)
			}
			got, err := st.ReadFrom(3, 4, 1<<20)
			if err != nil || len(got) != 4 || got[0].Seq != 3 || string(got[3].Data) != "event-00000006" {
				t.Fatalf("read: %v %v", got, err)
			}
			if err := st.Ack(12); err != nil {
				t.Fatal(err)
			}
			if err := st.Ack(99); err == nil {
				t.Fatal("ack beyond the end succeeded")
			}
			id := st.ID()
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = openTest(t, dir, Options{Durability: d})
			st, err = s.Stream("dev-1", StreamOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if st.ID() != id {
				t.Fatalf("stream id changed across reopen")
			}
			stats := st.Stats()
			if stats.Acked != 12 || stats.Head != 13 || stats.Next != 16 || stats.Depth != 3 {
				t.Fatalf("stats after reopen: %+v", stats)
			}
			got, err = st.ReadFrom(1, 100, 1<<20)
			if err != nil || len(got) != 3 || got[0].Seq != 13 {
				t.Fatalf("read after reopen: %v %v", got, err)
			}
			r, err = st.Append(ctx, recs(16, 1))
			if err != nil || r != (Range{16, 16}) {
				t.Fatalf("append after reopen: %v %v", r, err)
			}
			// Everything acked: positions still survive.
			if err := st.Ack(16); err != nil {
				t.Fatal(err)
			}
			s.Close()
			s = openTest(t, dir, Options{Durability: d})
			st, _ = s.Stream("dev-1", StreamOptions{})
			if r, _ := st.Append(ctx, recs(17, 1)); r.First != 17 {
				t.Fatalf("sequence restarted at %d after full ack and reopen", r.First)
			}
		})
	}
}

func TestReadLimits(t *testing.T) {
	s := openTest(t, t.TempDir(), Options{Durability: DurabilityNone})
	st, _ := s.Stream("d", StreamOptions{})
	for i := 0; i < 10; i++ {
		if _, err := st.Append(context.Background(), recs(i*10+1, 10)); err != nil {
			t.Fatal(err)
		}
	}
	got, _ := st.ReadFrom(5, 1000, 14*3) // 14-byte records
	if len(got) != 3 || got[0].Seq != 5 {
		t.Fatalf("max bytes: got %d records from %d", len(got), got[0].Seq)
	}
	got, _ = st.ReadFrom(5, 1000, 1)
	if len(got) != 1 {
		t.Fatalf("a read under one record's size must still return one, got %d", len(got))
	}
	got, _ = st.ReadFrom(1, 1000, 1<<20)
	for i, r := range got {
		if r.Seq != uint64(i+1) || string(r.Data) != fmt.Sprintf("event-%08d", i+1) {
			t.Fatalf("record %d: %d %q", i, r.Seq, r.Data)
		}
	}
	if len(got) != 100 {
		t.Fatalf("got %d records", len(got))
	}
	if got, _ := st.ReadFrom(101, 10, 100); len(got) != 0 {
		t.Fatalf("read past the end returned %d", len(got))
	}
}

func TestFullPolicies(t *testing.T) {
	ctx := context.Background()
	big := [][]byte{make([]byte, 1000)}
	t.Run("reject", func(t *testing.T) {
		s := openTest(t, t.TempDir(), Options{})
		st, _ := s.Stream("d", StreamOptions{MaxBytes: 4096, Full: Reject})
		var err error
		n := 0
		for ; n < 10 && err == nil; n++ {
			_, err = st.Append(ctx, big)
		}
		if !errors.Is(err, ErrFull) {
			t.Fatalf("want ErrFull, got %v after %d", err, n)
		}
		if st.Stats().Dropped != 0 {
			t.Fatal("reject dropped events")
		}
		if err := st.Ack(1); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Append(ctx, big); err != nil {
			t.Fatalf("append after ack freed space: %v", err)
		}
	})
	t.Run("block", func(t *testing.T) {
		s := openTest(t, t.TempDir(), Options{})
		st, _ := s.Stream("d", StreamOptions{MaxBytes: 4096, Full: Block})
		for i := 0; i < 4; i++ {
			if _, err := st.Append(ctx, big); err != nil {
				t.Fatal(err)
			}
		}
		short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		if _, err := st.Append(short, big); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("blocked append: want deadline, got %v", err)
		}
		done := make(chan error, 1)
		go func() { _, err := st.Append(ctx, big); done <- err }()
		if err := st.Ack(2); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("append after ack: %v", err)
		}
	})
	t.Run("drop_oldest", func(t *testing.T) {
		s := openTest(t, t.TempDir(), Options{Durability: DurabilityNone})
		st, _ := s.Stream("d", StreamOptions{MaxBytes: 4096})
		for i := 0; i < 10; i++ {
			if _, err := st.Append(ctx, big); err != nil {
				t.Fatal(err)
			}
		}
		stats := st.Stats()
		if stats.Bytes > 4096 || stats.Dropped == 0 || stats.Head != 1+stats.Dropped {
			t.Fatalf("stats: %+v", stats)
		}
		gaps := st.Gaps()
		if len(gaps) != 1 || gaps[0].First != 1 || gaps[0].Last != stats.Head-1 || gaps[0].Reason != ReasonMaxBytes {
			t.Fatalf("gaps: %+v (stats %+v)", gaps, stats)
		}
		got, _ := st.ReadFrom(1, 100, 1<<20)
		if len(got) == 0 || got[0].Seq != stats.Head {
			t.Fatalf("read after drops starts at %v, head %d", got, stats.Head)
		}
		if err := st.Ack(gaps[0].Last + 1); err != nil {
			t.Fatal(err)
		}
		if g := st.Gaps(); len(g) != 0 {
			t.Fatalf("ack over the gap left %v", g)
		}
	})
	t.Run("too_large", func(t *testing.T) {
		s := openTest(t, t.TempDir(), Options{})
		st, _ := s.Stream("d", StreamOptions{MaxBytes: 4096})
		if _, err := st.Append(ctx, [][]byte{make([]byte, 5000)}); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("want ErrTooLarge, got %v", err)
		}
	})
}

func TestMaxAge(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	s := openTest(t, t.TempDir(), Options{Now: clock, MaintenanceInterval: time.Hour})
	st, _ := s.Stream("d", StreamOptions{MaxAge: time.Minute})
	t0 := now
	st.Append(context.Background(), recs(1, 5))
	now = now.Add(30 * time.Second)
	t1 := now
	st.Append(context.Background(), recs(6, 5))
	if got := st.Stats().OldestMs; got != t0.UnixMilli() {
		t.Fatalf("oldest %d, want first append %d", got, t0.UnixMilli())
	}
	now = now.Add(45 * time.Second)
	s.Maintain()
	stats := st.Stats()
	if stats.Head != 6 || stats.Dropped != 5 || stats.OldestMs != t1.UnixMilli() {
		t.Fatalf("after max age: %+v (want oldest %d)", stats, t1.UnixMilli())
	}
	if g := st.Gaps(); len(g) != 1 || g[0] != (Gap{1, 5, ReasonMaxAge}) {
		t.Fatalf("gaps: %v", g)
	}
	if err := st.Ack(10); err != nil {
		t.Fatal(err)
	}
	if got := st.Stats().OldestMs; got != 0 {
		t.Fatalf("oldest of an empty stream: %d", got)
	}
}

func TestManyStreamsShareOneStore(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir, Options{})
	ctx := context.Background()
	ids := map[string]bool{}
	for i := 0; i < 200; i++ {
		st, err := s.Stream(fmt.Sprintf("dev-%d", i), StreamOptions{MaxBytes: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		ids[st.ID().String()] = true
		if _, err := st.Append(ctx, recs(0, i%7+1)); err != nil {
			t.Fatal(err)
		}
	}
	if len(ids) != 200 {
		t.Fatalf("stream ids not unique: %d", len(ids))
	}
	s.Close()
	s = openTest(t, dir, Options{})
	names, _ := s.Names()
	if len(names) != 200 {
		t.Fatalf("names after reopen: %d", len(names))
	}
	for i := 0; i < 200; i++ {
		st, _ := s.Stream(fmt.Sprintf("dev-%d", i), StreamOptions{})
		if d := st.Stats().Depth; d != uint64(i%7+1) {
			t.Fatalf("stream %d depth %d", i, d)
		}
	}
}

// TestReadsOnlyDurable: readers (the uplink) see records only once they are
// durable per the mode, so a hub can never hold records that a power loss
// then takes from the buffer and whose sequence numbers would be reused.
func TestReadsOnlyDurable(t *testing.T) {
	ctx := context.Background()
	t.Run("interval", func(t *testing.T) {
		// Long enough that no sync runs before the first read; the
		// WaitDurable append then waits for it.
		s := openTest(t, t.TempDir(), Options{Durability: DurabilityInterval, SyncInterval: 5 * time.Second})
		st, _ := s.Stream("d", StreamOptions{})
		if _, err := st.Append(ctx, recs(1, 5)); err != nil {
			t.Fatal(err)
		}
		if got, _ := st.ReadFrom(1, 100, 1<<20); len(got) != 0 {
			t.Fatalf("read %d records that are not yet synced", len(got))
		}
		if _, err := st.Append(ctx, recs(6, 5), AppendOptions{WaitDurable: true}); err != nil {
			t.Fatal(err)
		}
		if got, _ := st.ReadFrom(1, 100, 1<<20); len(got) != 10 {
			t.Fatalf("after a sync: read %d records, want 10", len(got))
		}
	})
	t.Run("sync", func(t *testing.T) {
		s := openTest(t, t.TempDir(), Options{Durability: DurabilitySync})
		st, _ := s.Stream("d", StreamOptions{})
		st.Append(ctx, recs(1, 5))
		if got, _ := st.ReadFrom(1, 100, 1<<20); len(got) != 5 {
			t.Fatalf("sync mode: read %d records after Append returned, want 5", len(got))
		}
	})
}
