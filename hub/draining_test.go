package hub

import (
	"edgeflow/hub/hubapi"
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
		bl   hubapi.Backlog
		want bool
	}{
		{"no backlog", hubapi.Backlog{}, false},
		{"in flight only", hubapi.Backlog{Events: 2000, OldestNs: send - int64(800*time.Millisecond)}, false},
		{"age unknown", hubapi.Backlog{Events: 50000}, false},
		{"back from an outage", hubapi.Backlog{Events: 50000, OldestNs: send - int64(2*time.Hour)}, true},
		{"just past the threshold", hubapi.Backlog{Events: 10, OldestNs: send - int64(drainingBacklogAge) - 1}, true},
	}
	for _, c := range cases {
		if got := draining(&AppliedBatch{SendTimeNs: send, Backlog: c.bl}); got != c.want {
			t.Errorf("%s: draining = %v, want %v", c.name, got, c.want)
		}
	}
}
