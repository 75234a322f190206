package simulator

import (
	"testing"
	"time"

	"edgeflow/buffer"
)

// TestAckBeforeAppendRecorded: the hub's ack can reach the uplink before
// the appending goroutine records its append. Those events count as acked
// by the ack that covered them, not by the next one a second later.
func TestAckBeforeAppendRecorded(t *testing.T) {
	f := &Fleet{}
	w := &watchedStream{d: &device{f: f}}
	start := time.Now()
	w.hubAcked(3, start.UnixNano()) // covers 1..3, whose append is not recorded yet
	time.Sleep(200 * time.Millisecond)
	w.appended(buffer.Range{First: 1, Last: 4}, start.Add(-20*time.Millisecond))
	q := f.latency.Summary()
	// About 20 ms (append start to the ack); counted at the record, it
	// would be 220 ms or more.
	if q.Count != 3 || q.MaxMs >= 200 {
		t.Fatalf("after the late record: %+v, want 3 events of about 20 ms", q)
	}
	if len(w.q) != 1 || w.q[0].first != 4 || w.q[0].last != 4 {
		t.Fatalf("queue %+v: want event 4 alone left", w.q)
	}
	w.hubAcked(4, time.Now().UnixNano())
	if q := f.latency.Summary(); q.Count != 4 || q.MaxMs < 200 {
		t.Fatalf("after acking 4: %+v, want 4 events, the last 220 ms or more", q)
	}
	if f.acked.Load() != 4 || len(w.q) != 0 {
		t.Fatalf("acked %d, queue %+v", f.acked.Load(), w.q)
	}
}
