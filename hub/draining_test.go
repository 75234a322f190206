package hub

import (
	"testing"
	"time"
)

// TestDraining: only a backlog whose oldest event is well behind the send
// time releases a stream from the hub watermark; the batch or two a live
// agent always has in flight does not.
func TestDraining(t *testing.T) {
	send := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC).UnixNano()
	cases := []struct {
		name string
		bl   Backlog
		want bool
	}{
		{"no backlog", Backlog{}, false},
		{"in flight only", Backlog{Events: 2000, OldestNs: send - int64(800*time.Millisecond)}, false},
		{"age unknown", Backlog{Events: 50000}, false},
		{"back from an outage", Backlog{Events: 50000, OldestNs: send - int64(2*time.Hour)}, true},
		{"just past the threshold", Backlog{Events: 10, OldestNs: send - int64(drainingBacklogAge) - 1}, true},
	}
	for _, c := range cases {
		if got := draining(&AppliedBatch{SendTimeNs: send, Backlog: c.bl}); got != c.want {
			t.Errorf("%s: draining = %v, want %v", c.name, got, c.want)
		}
	}
}
