package uplink

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"edgeflow/buffer"
)

// dropOnGaps is a buffer stream whose first Gaps call after it is armed
// appends enough events to make the buffer drop its oldest blocks: the
// device appending at its bound while the uplink is between reading a pass
// of batches and reading the gaps for their header.
type dropOnGaps struct {
	*buffer.Stream
	t       testing.TB
	armed   atomic.Bool
	dropped atomic.Bool
}

func (d *dropOnGaps) Gaps() []buffer.Gap {
	if d.armed.CompareAndSwap(true, false) {
		head := d.Stats().Head
		for range 8 {
			next := d.Stats().Next
			recs := make([][]byte, 50)
			for i := range recs {
				recs[i] = event(next + uint64(i))
			}
			if _, err := d.Append(context.Background(), recs); err != nil {
				d.t.Errorf("append: %v", err)
				break
			}
		}
		d.dropped.Store(d.Stats().Head > head)
	}
	return d.Stream.Gaps()
}

// TestGapsAfterReadNotOverBatch: a drop between reading a pass of batches
// and reading the gaps for their header makes a gap over events the batches
// carry. hubd rejects a batch whose gaps overlap its events, so such a
// batch must report only the gap's part outside its own range; every event
// is then delivered or reported dropped, none lost.
func TestGapsAfterReadNotOverBatch(t *testing.T) {
	url := startMochi(t)
	s, err := buffer.Open(t.TempDir(), buffer.Options{Logger: quietLogger(), Durability: buffer.DurabilityNone})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	inner, err := s.Stream("gappy", buffer.StreamOptions{Full: buffer.DropOldest, MaxBytes: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	appendEvents(t, inner, 300, 50)
	if g := inner.Gaps(); len(g) != 0 {
		t.Fatalf("dropped before the test began: %v", g)
	}
	st := &dropOnGaps{Stream: inner, t: t}
	st.armed.Store(true)
	r := newResponder(t, url, nil)
	u, err := New(st, Options{DeviceID: "gappy", Brokers: []string{url}, MaxBatchEvents: 100, Window: 4, Linger: NoLinger,
		AckTimeout: 2 * time.Second, BackoffMin: 20 * time.Millisecond, PollInterval: 10 * time.Millisecond,
		ConnectTimeout: 2 * time.Second, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	runUplink(t, u)
	waitFor(t, 15*time.Second, "every event acked", func() bool {
		s := inner.Stats()
		return s.Acked == s.Next-1
	})
	if !st.dropped.Load() {
		t.Fatal("the buffer dropped nothing: the test did not make the race it is about")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	last := inner.Stats().Next - 1
	for seq := uint64(1); seq <= last; seq++ {
		if r.received[seq] > 0 {
			continue
		}
		reported := false
		for _, g := range r.gaps {
			reported = reported || (seq >= g[0] && seq <= g[1])
		}
		if !reported {
			t.Fatalf("seq %d of [1, %d] neither delivered nor reported dropped (gaps %v)", seq, last, r.gaps)
		}
	}
}
