package uplink

import (
	"sync/atomic"
	"testing"
	"time"

	"edgeflow/buffer"
	"edgeflow/wire/wirepb"
)

// scanCounter counts the uplink's reads of its buffer.
type scanCounter struct {
	*buffer.Stream
	scans atomic.Int64
}

func (s *scanCounter) Scan(seq uint64, maxEvents, maxBytes int, fn func(uint64, []byte) bool) (int, error) {
	s.scans.Add(1)
	return s.Stream.Scan(seq, maxEvents, maxBytes, fn)
}

// Draining a backlog, the uplink waits for a quarter of its window to be
// answered and reads those batches in one pass, instead of one buffer read
// per ack; everything still arrives.
func TestDrainRefillsInPasses(t *testing.T) {
	url := startMosquitto(t)
	_, st := openStream(t, "dev-refill")
	const batches, per = 96, 100
	appendEvents(t, st, batches*per, 1000)
	r := newResponder(t, url, func(*wirepb.Batch, int) verdict { return verdict{} })
	sc := &scanCounter{Stream: st}
	u, err := New(sc, Options{DeviceID: st.Name(), Brokers: []string{url}, MaxBatchEvents: per, Window: 16, Linger: NoLinger,
		AckTimeout: 5 * time.Second, PollInterval: 10 * time.Millisecond, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	runUplink(t, u)
	waitFor(t, 30*time.Second, "backlog acked", func() bool { return st.Stats().Acked == batches*per })
	r.check(t, batches*per)
	// One pass for the first window, then one per 4 answers (16/4) at most;
	// a few more for passes that found the rest not yet readable.
	n := sc.scans.Load()
	t.Logf("%d buffer reads for %d batches", n, batches)
	if n > (batches-16)/4+1+4 {
		t.Fatalf("%d buffer reads for %d batches in a window of 16, want about %d", n, batches, (batches-16)/4+1)
	}
}
