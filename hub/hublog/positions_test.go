package hublog

import (
	"errors"
	"io"
	"log/slog"
	"testing"

	badger "github.com/dgraph-io/badger/v4"
)

// TestLogPositions: positions load back per partition and per stream (a
// stream whose name is a prefix of another's does not see its keys); a
// value of the wrong size is reported as corrupt.
func TestLogPositions(t *testing.T) {
	st, err := OpenStore(t.TempDir(), false, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	set := func(k, v []byte) {
		if err := st.DB.Update(func(txn *badger.Txn) error { return txn.Set(k, v) }); err != nil {
			t.Fatal(err)
		}
	}
	set(LogPositionKey("EDGEFLOW", 0), EncodeLogPosition(17))
	set(LogPositionKey("EDGEFLOW", 63), EncodeLogPosition(1<<40))
	set(LogPositionKey("EDGEFLOW2", 1), EncodeLogPosition(5))
	got, err := st.LoadLogPositions("EDGEFLOW")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != 17 || got[63] != 1<<40 {
		t.Fatalf("positions %v, want 0:17 63:%d", got, uint64(1<<40))
	}
	if got, err := st.LoadLogPositions("OTHER"); err != nil || len(got) != 0 {
		t.Fatalf("a stream without positions: %v, %v", got, err)
	}
	set(LogPositionKey("EDGEFLOW", 2), []byte{1, 2, 3})
	if _, err := st.LoadLogPositions("EDGEFLOW"); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a 3-byte position: %v, want ErrCorrupt", err)
	}
}
