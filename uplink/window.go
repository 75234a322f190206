package uplink

import (
	"cmp"
	"slices"
	"time"
)

// flight is one batch published (or about to be) and not yet answered.
type flight struct {
	first, last uint64
	payload     []byte    // the frame; resends publish the same bytes
	queued      bool      // must be published (new, timed out, or after a reconnect)
	sent        time.Time // last publish (monotonic)
	deadline    time.Time // resend after this unless answered
	sends       int       // publishes so far
	done        bool      // answered by the hub, waiting for older batches
	// reports is the last rejected range the batch's header reports
	// (0: none); its answer means the hub has heard of them (gaps.go).
	reports uint64
	// firstPub and lastPub number the batch's first and last publish in
	// the Uplink's order of publishes (0: never published); later says
	// the hub answered its last publish RETRY_LATER; fastAt is when its
	// resend was last moved up and fast whether the next publish is that
	// resend (fastresend.go).
	firstPub, lastPub uint64
	later, fast       bool
	fastAt            time.Time
}

func (f *flight) events() int { return int(f.last - f.first + 1) }

// window is the ordered list of batches in flight. The buffer may be acked
// only through its contiguous prefix of answered batches: an answer for a
// later batch waits until every older one is answered too. Owned by the
// send loop.
type window struct {
	q []*flight // ascending by first, disjoint
}

func (w *window) len() int { return len(w.q) }

func (w *window) push(f *flight) { w.q = append(w.q, f) }

// find returns the batch with exactly this range, or nil.
func (w *window) find(first, last uint64) *flight {
	var one [1]*flight
	if fs := w.run(one[:0], first, last); len(fs) == 1 {
		return fs[0]
	}
	return nil
}

// run appends to dst the batches that cover first..last exactly, one
// after the other (an ack the hub gave a run of batches), and returns nil
// if none do.
func (w *window) run(dst []*flight, first, last uint64) []*flight {
	i, _ := slices.BinarySearchFunc(w.q, first, func(f *flight, s uint64) int { return cmp.Compare(f.first, s) })
	for next := first; i < len(w.q) && w.q[i].first == next && w.q[i].last <= last; i++ {
		dst = append(dst, w.q[i])
		if w.q[i].last == last {
			return dst
		}
		next = w.q[i].last + 1
	}
	return nil
}

// popDone removes the answered prefix and returns the last sequence number
// it covered (ok false if the oldest batch is still unanswered).
func (w *window) popDone() (upTo uint64, ok bool) {
	i := 0
	for i < len(w.q) && w.q[i].done {
		upTo, ok = w.q[i].last, true
		i++
	}
	if i > 0 {
		n := copy(w.q, w.q[i:])
		clear(w.q[n:])
		w.q = w.q[:n]
	}
	return upTo, ok
}

// events is the number of events in flight.
func (w *window) events() int {
	n := 0
	for _, f := range w.q {
		n += f.events()
	}
	return n
}
