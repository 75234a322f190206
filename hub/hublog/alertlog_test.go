package hublog

import (
	"fmt"
	"io"
	"log/slog"
	"testing"
)

// TestAlertLog: changes read back in order after a position, a commit
// stores the position and prunes what every output delivered, the bounds
// follow, and a reset clears the log and moves every position.
func TestAlertLog(t *testing.T) {
	dir := t.TempDir()
	st, err := OpenStore(dir, false, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	var in []AlertChange
	for seq := uint64(1); seq <= 300; seq++ {
		in = append(in, AlertChange{Seq: seq, JSON: fmt.Appendf(nil, `{"id":"a/%d","revision":1}`, seq)})
	}
	if err := st.PutAlertChanges(in); err != nil {
		t.Fatal(err)
	}
	got, err := st.AlertChangesAfter(100, 64)
	if err != nil || len(got) != 64 || got[0].Seq != 101 || got[63].Seq != 164 || string(got[0].JSON) != `{"id":"a/101","revision":1}` {
		t.Fatalf("after 100: %d changes %v", len(got), err)
	}
	if err := st.CommitAlertOutput("ops", 150, 1, 120); err != nil {
		t.Fatal(err)
	}
	if first, last, err := st.AlertChangeBounds(); err != nil || first != 121 || last != 300 {
		t.Fatalf("bounds %d..%d %v, want 121..300", first, last, err)
	}
	if err := st.CommitAlertOutput("bus", 7, 0, 0); err != nil {
		t.Fatal(err)
	}
	st.Close()
	if st, err = OpenStore(dir, false, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	pos, err := st.LoadAlertOutputPositions()
	if err != nil || len(pos) != 2 || pos["ops"] != 150 || pos["bus"] != 7 {
		t.Fatalf("positions %v %v", pos, err)
	}
	if err := st.ResetAlertOutputs(40); err != nil {
		t.Fatal(err)
	}
	pos, _ = st.LoadAlertOutputPositions()
	if first, last, err := st.AlertChangeBounds(); err != nil || first != 0 || last != 0 || pos["ops"] != 40 || pos["bus"] != 40 {
		t.Fatalf("after reset: bounds %d..%d %v, positions %v", first, last, err, pos)
	}
}
