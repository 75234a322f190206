package registry

import (
	"os"
	"slices"
	"testing"

	"edgeflow/hub/hublog"
	"edgeflow/hub/ranges"
)

// TestDedupStates derives the committer's applied ranges from the
// registry of testdata/snapshot_v1.json: applied plus refused sequences,
// the horizon past the trailing gap, the last batch's server time.
func TestDedupStates(t *testing.T) {
	snap, err := os.ReadFile("testdata/snapshot_v1.json")
	if err != nil {
		t.Fatal(err)
	}
	r := New(8)
	if err := r.Restore(snap); err != nil {
		t.Fatal(err)
	}
	got := r.DedupStates()
	if len(got) != 2 {
		t.Fatalf("%d streams, want 2: %v", len(got), got)
	}
	for k, st := range got {
		if k.Device != "dev-full" {
			t.Fatalf("stream of %s", k.Device)
		}
		switch k.ID.String() {
		case "0123456789abcdef0123456789abcdef":
			if !slices.Equal(st.Applied.Ranges(), []ranges.SeqRange{{First: 1, Last: 102}, {First: 105, Last: 220}}) ||
				st.Horizon != 230 || st.LastSeenNs != 1700000000123456789 {
				t.Fatalf("first stream %+v", st)
			}
		case "fedcba9876543210fedcba9876543210":
			if want := (hublog.DedupState{Horizon: 1, LastSeenNs: 1690000000000000000}); st.Horizon != want.Horizon ||
				st.LastSeenNs != want.LastSeenNs || !st.Applied.Covers(1, 1) || st.Applied.Count() != 1 {
				t.Fatalf("second stream %+v", st)
			}
		default:
			t.Fatalf("stream %s", k.ID)
		}
	}
}
