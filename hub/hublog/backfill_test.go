package hublog

import (
	"errors"
	"io"
	"log/slog"
	"testing"

	badger "github.com/dgraph-io/badger/v4"

	"edgeflow/hub/ranges"
)

// TestBackfillEntries: an entry written under its backfill key is read by
// ReadEntry through its flagged position, never by the log's replay or as
// a log entry at the plain position; the store still counts as empty for
// a restore; the plan and range sets round-trip and a bad plan is
// ErrCorrupt.
func TestBackfillEntries(t *testing.T) {
	st, err := OpenStore(t.TempDir(), false, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if p, err := st.LoadBackfillPlan(); p != nil || err != nil {
		t.Fatalf("plan of a new store: %+v, %v", p, err)
	}
	e := Entry{Seq: BackfillSeq(42), Kind: KindBatch, ServerTimeNs: 1234, Device: "dev-1", FirstSeq: 1, Count: 3,
		Fresh: []ranges.SeqRange{{First: 1, Last: 3}}, Payload: []byte("batch")}
	var rs ranges.RangeSet
	rs.Add(1, 3)
	rs.Add(7, 9)
	plan := &BackfillPlan{Stream: "EDGEFLOW", Positions: map[int]uint64{0: 40, 5: 42}, Through: 12, Entries: 3, IncompleteBeforeNs: 99}
	err = st.DB.Update(func(txn *badger.Txn) error {
		if err := txn.Set(BackfillKey(42, 1234), e.Encode()); err != nil {
			return err
		}
		if err := txn.Set(BackfillDoneKey("dev-1", e.Stream), EncodeRangeSet(&rs)); err != nil {
			return err
		}
		return SetBackfillPlan(txn, plan)
	})
	if err != nil {
		t.Fatal(err)
	}
	err = st.DB.View(func(txn *badger.Txn) error {
		got, ok, err := ReadEntry(txn, BackfillSeq(42), 1234)
		if err != nil || !ok || got.Seq != BackfillSeq(42) || string(got.Payload) != "batch" || !IsBackfilled(got.Seq) {
			t.Fatalf("flagged position: %+v, %v, %v", got, ok, err)
		}
		if _, ok, err := ReadEntry(txn, 42, 1234); ok || err != nil {
			t.Fatalf("the plain position reads the backfilled entry: %v, %v", ok, err)
		}
		back, ok, err := LoadRangeSet(txn, BackfillDoneKey("dev-1", e.Stream))
		if err != nil || !ok || back.Len() != 2 || back.Count() != 6 {
			t.Fatalf("range set: %v, %v, %v", back, ok, err)
		}
		if _, ok, err := LoadRangeSet(txn, BackfillLimitKey("dev-1", e.Stream)); ok || err != nil {
			t.Fatalf("an absent range set: %v, %v", ok, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Replay(0, func(e *Entry) error { return errors.New("replayed a backfilled entry") }); err != nil {
		t.Fatal(err)
	}
	if empty, err := st.IsEmpty(); !empty || err != nil {
		t.Fatalf("IsEmpty with only backfill keys: %v, %v", empty, err)
	}
	got, err := st.LoadBackfillPlan()
	if err != nil || got.Stream != plan.Stream || got.Positions[5] != 42 || got.End() != 42 || got.Through != 12 || got.IncompleteBeforeNs != 99 {
		t.Fatalf("plan: %+v, %v", got, err)
	}
	if err := st.DB.Update(func(txn *badger.Txn) error { return txn.Set([]byte(KeyBackfillPlan), []byte("{")) }); err != nil {
		t.Fatal(err)
	}
	if _, err := st.LoadBackfillPlan(); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a bad plan: %v, want ErrCorrupt", err)
	}
}
