package buffer

import (
	"context"
	"testing"
	"time"
)

// TestReadableSignals checks that Readable fires once appended records
// become readable: at the next sync in the interval mode, at once in the
// others; and that nothing was readable before the signal.
func TestReadableSignals(t *testing.T) {
	ctx := context.Background()
	for _, d := range []Durability{DurabilityInterval, DurabilitySync, DurabilityNone} {
		t.Run(string(d), func(t *testing.T) {
			s := openTest(t, t.TempDir(), Options{Durability: d, SyncInterval: 50 * time.Millisecond})
			st, err := s.Stream("d", StreamOptions{})
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-st.Readable():
				t.Fatal("signal before any append")
			default:
			}
			if _, err := st.Append(ctx, recs(1, 5)); err != nil {
				t.Fatal(err)
			}
			select {
			case <-st.Readable():
			case <-time.After(10 * time.Second):
				t.Fatal("no signal after an append")
			}
			if got, err := st.ReadFrom(1, 100, 1<<20); err != nil || len(got) != 5 {
				t.Fatalf("after the signal: %d records, %v", len(got), err)
			}
			if s := st.Stats(); s.Readable != 6 || s.Next != 6 {
				t.Fatalf("after the signal: Stats readable %d next %d, want 6 and 6", s.Readable, s.Next)
			}
		})
	}
}

// TestStatsReadable checks that Stats says how far records are readable:
// in the interval mode, appended records are not until the next sync.
func TestStatsReadable(t *testing.T) {
	s := openTest(t, t.TempDir(), Options{Durability: DurabilityInterval, SyncInterval: time.Minute})
	st, err := s.Stream("d", StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Append(context.Background(), recs(1, 5)); err != nil {
		t.Fatal(err)
	}
	if s := st.Stats(); s.Readable != 1 || s.Next != 6 {
		t.Fatalf("before a sync: Stats readable %d next %d, want 1 and 6", s.Readable, s.Next)
	}
	if got, err := st.ReadFrom(1, 100, 1<<20); err != nil || len(got) != 0 {
		t.Fatalf("before a sync: %d records readable, %v", len(got), err)
	}
}
