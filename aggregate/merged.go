package aggregate

import (
	"math"
	"time"
)

// pendingEvent is one event of the merged stream, without pointers: its
// metric, device and tags come from its series and stream.
type pendingEvent struct {
	t      int64
	seq    uint64
	value  float64
	series uint32
	stream uint32
	late   bool
}

// pendingLess is the merged stream's order: event time, then stream, then
// sequence.
func pendingLess(a, b *pendingEvent) bool {
	if a.t != b.t {
		return a.t < b.t
	}
	if a.stream != b.stream {
		return a.stream < b.stream
	}
	return a.seq < b.seq
}

// maxInsertDepth is how far back an out-of-order event is inserted into
// its stream's open run before it starts a new run instead: jitter of a
// few events costs a short copy, a stream that jumps back costs a run.
const maxInsertDepth = 32

// Bounds of the pool of drained run buffers (events per buffer, buffers).
const (
	maxPooledRunCap = 1 << 16
	maxPooledRuns   = 256
)

// run is a sorted (pendingLess) sequence of one stream's pending events;
// evs[:head] are already released. A stream appends to its open run and
// starts a new one when an event is too far out of order.
type run struct {
	evs    []pendingEvent
	head   int
	stream uint32
	open   bool
}

// mergedStream holds events until the hub watermark passes them, then
// releases them in event-time order (ties by stream, then sequence) into a
// bounded ring that readers follow by offset. An event older than what was
// already released is released at once, flagged late.
//
// Events of one stream arrive almost in order, so pending events are kept
// as per-stream sorted runs and a release is a k-way merge of the runs'
// ready prefixes (a loser tree, log2(runs) comparisons per event) instead
// of a sort of everything pending.
type mergedStream struct {
	enabled     bool
	runs        []run   // every run holds at least one pending event
	open        []int32 // stream index -> its open run in runs, or -1
	count       int     // pending events
	free        [][]pendingEvent
	srcs        [][]pendingEvent // merge scratch
	tree        []mergeNode      // merge scratch
	released    int64            // events with t < released are out
	hasReleased bool
	out         ring[pendingEvent]
	moved       bool // something was released since the last notification
}

func newMergedStream(capacity int) mergedStream {
	return mergedStream{enabled: true, out: newRing[pendingEvent](capacity)}
}

func (m *mergedStream) add(e *Engine, ev *Event, id, si uint32) {
	pe := pendingEvent{t: ev.Time, seq: ev.Seq, value: ev.Value, series: id, stream: si}
	if m.hasReleased && ev.Time < m.released {
		pe.late = true
		m.out.push(pe)
		m.moved = true
		return
	}
	m.push(pe)
	if m.count > e.opt.MaxPending {
		m.forceRelease(e)
	}
}

// push adds one pending event to its stream's runs.
func (m *mergedStream) push(pe pendingEvent) {
	m.count++
	for int(pe.stream) >= len(m.open) {
		m.open = append(m.open, -1)
	}
	if ri := m.open[pe.stream]; ri >= 0 {
		r := &m.runs[ri]
		n := len(r.evs)
		if !pendingLess(&pe, &r.evs[n-1]) {
			r.evs = append(r.evs, pe)
			return
		}
		j := n - 1 // pe goes before evs[j]
		for j > r.head && n-j < maxInsertDepth && pendingLess(&pe, &r.evs[j-1]) {
			j--
		}
		if j == r.head || !pendingLess(&pe, &r.evs[j-1]) {
			r.evs = append(r.evs, pendingEvent{})
			copy(r.evs[j+1:], r.evs[j:n])
			r.evs[j] = pe
			return
		}
		r.open = false
	}
	var buf []pendingEvent
	if n := len(m.free); n > 0 {
		buf, m.free = m.free[n-1], m.free[:n-1]
	} else {
		buf = make([]pendingEvent, 0, 64)
	}
	m.open[pe.stream] = int32(len(m.runs))
	m.runs = append(m.runs, run{evs: append(buf, pe), stream: pe.stream, open: true})
}

// release releases the pending events before wm.
func (m *mergedStream) release(e *Engine, wm int64) {
	srcs := m.srcs[:0]
	total := 0
	for i := range m.runs {
		r := &m.runs[i]
		evs := r.evs[r.head:]
		n := readyPrefix(evs, wm)
		if n > 0 {
			srcs = append(srcs, evs[:n])
			r.head += n
			total += n
		}
	}
	if len(srcs) > 0 {
		m.count -= total
		mergeRuns(srcs, &m.tree, &m.out, total-len(m.out.buf), nil)
		m.moved = true
		m.compact()
	}
	clear(srcs)
	m.srcs = srcs[:0]
	if !m.hasReleased || wm > m.released {
		m.released, m.hasReleased = wm, true
	}
}

// readyPrefix is the number of leading events of a sorted run before wm.
func readyPrefix(evs []pendingEvent, wm int64) int {
	if len(evs) == 0 || evs[0].t >= wm {
		return 0
	}
	if evs[len(evs)-1].t < wm {
		return len(evs)
	}
	lo, hi := 1, len(evs)-1
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if evs[mid].t < wm {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// compact drops drained runs (pooling their buffers) and moves the rest
// of half-released runs to the front of their buffers.
func (m *mergedStream) compact() {
	k := 0
	for i := range m.runs {
		r := m.runs[i]
		if r.head == len(r.evs) {
			if r.open {
				m.open[r.stream] = -1
			}
			m.recycle(r.evs)
			continue
		}
		if r.head > 0 && 2*r.head >= len(r.evs) {
			n := copy(r.evs, r.evs[r.head:]) // no pointers: the tail needs no clearing
			r.evs, r.head = r.evs[:n], 0
		}
		if r.open {
			m.open[r.stream] = int32(k)
		}
		m.runs[k] = r
		k++
	}
	clear(m.runs[k:])
	m.runs = m.runs[:k]
}

func (m *mergedStream) recycle(buf []pendingEvent) {
	if cap(buf) <= maxPooledRunCap && len(m.free) < maxPooledRuns {
		m.free = append(m.free, buf[:0])
	}
}

// sorted returns every pending event in release order (a new slice); it
// only reads the runs.
func (m *mergedStream) sorted() []pendingEvent {
	srcs := make([][]pendingEvent, 0, len(m.runs))
	for i := range m.runs {
		srcs = append(srcs, m.runs[i].evs[m.runs[i].head:])
	}
	var tree []mergeNode // not m.tree: Snapshot calls this under the read lock
	return mergeRuns(srcs, &tree, nil, 0, make([]pendingEvent, 0, m.count))
}

// reset replaces the pending events with evs (any order).
func (m *mergedStream) reset(evs []pendingEvent) {
	for i := range m.runs {
		m.recycle(m.runs[i].evs)
	}
	clear(m.runs)
	m.runs = m.runs[:0]
	for i := range m.open {
		m.open[i] = -1
	}
	m.count = 0
	for _, pe := range evs {
		m.push(pe)
	}
}

// forceRelease releases the older half of a full pending buffer ahead of
// the watermark, so memory stays bounded; later events older than what
// went out are flagged late.
func (m *mergedStream) forceRelease(e *Engine) {
	all := m.sorted()
	half := len(all) / 2
	cut := all[half].t
	n := half
	for n > 0 && all[n-1].t == cut {
		n-- // do not split equal times
	}
	if n == 0 {
		n = half
	}
	e.stats.forced += uint64(n)
	through := all[n-1].t + 1
	for i := range all[:n] {
		m.out.push(all[i])
	}
	m.moved = true
	m.reset(all[n:])
	if !m.hasReleased || through > m.released {
		m.released, m.hasReleased = through, true
	}
}

// mergeNode is a source's head in the loser tree: its sort key, inline so
// that a match reads no source.
type mergeNode struct {
	t      int64
	seq    uint64
	stream uint32
	src    int32
	done   bool // the source is exhausted; t is then MaxInt64
}

// nodeLess is pendingLess on heads, exhausted sources last and ties by
// source.
func nodeLess(x, y *mergeNode) bool {
	if x.t != y.t {
		return x.t < y.t
	}
	if x.done != y.done {
		return y.done
	}
	if x.stream != y.stream {
		return x.stream < y.stream
	}
	if x.seq != y.seq {
		return x.seq < y.seq
	}
	return x.src < y.src
}

func headOf(srcs [][]pendingEvent, i int32) mergeNode {
	if s := srcs[i]; len(s) > 0 {
		return mergeNode{t: s[0].t, seq: s[0].seq, stream: s[0].stream, src: i}
	}
	return mergeNode{t: math.MaxInt64, src: i, done: true}
}

// mergeRuns merges the sorted srcs in pendingLess order (ties: the lower
// source first), consuming them: into ring dst when it is not nil (the
// first overwritten events, which the ring would overwrite within this
// merge, are only counted), else appended to flat, which it returns. tree is scratch space kept between
// calls. It is a loser tree: one comparison per level, log2(len(srcs))
// levels per event.
func mergeRuns(srcs [][]pendingEvent, tree *[]mergeNode, dst *ring[pendingEvent], overwritten int, flat []pendingEvent) []pendingEvent {
	k := len(srcs)
	if k == 0 {
		return flat
	}
	if cap(*tree) < 2*k {
		*tree = make([]mergeNode, 2*k)
	}
	// Nodes 1..k-1 are internal, the children of n are 2n and 2n+1, node
	// k+i is source i. losers[n] keeps the loser of the match at n,
	// winners[n] (build only) the one that climbs on.
	losers, winners := (*tree)[:k], (*tree)[k:2*k]
	child := func(c int) mergeNode {
		if c >= k {
			return headOf(srcs, int32(c-k))
		}
		return winners[c]
	}
	cur := headOf(srcs, 0)
	for n := k - 1; n >= 1; n-- {
		a, b := child(2*n), child(2*n+1)
		if nodeLess(&a, &b) {
			winners[n], losers[n] = a, b
		} else {
			winners[n], losers[n] = b, a
		}
	}
	if k > 1 {
		cur = winners[1]
	}
	skipped := max(overwritten, 0)
	for !cur.done {
		s := srcs[cur.src]
		switch {
		case dst != nil && overwritten > 0:
			overwritten--
			if overwritten == 0 {
				dst.skip(skipped)
			}
		case dst != nil:
			dst.push(s[0])
		default:
			flat = append(flat, s[0])
		}
		s = s[1:]
		srcs[cur.src] = s
		if len(s) > 0 {
			cur.t, cur.seq, cur.stream = s[0].t, s[0].seq, s[0].stream
		} else {
			cur.t, cur.done = math.MaxInt64, true
		}
		for n := (k + int(cur.src)) / 2; n >= 1; n /= 2 {
			if nodeLess(&losers[n], &cur) {
				losers[n], cur = cur, losers[n]
			}
		}
	}
	return flat
}

// StreamEvent is one event of the merged stream.
type StreamEvent struct {
	// Offset is the event's position in the merged stream; it increases
	// by one per event. Resume with ReadStream(offset+1, ...).
	Offset uint64
	Device string
	Stream StreamID
	Seq    uint64
	Metric string
	// Tags are the series' kept tags (Options.TagKeys), sorted; shared,
	// do not modify.
	Tags  []Tag
	Value float64
	Time  time.Time
	// Late is true when the event came after the watermark had passed its
	// time, so it is out of event-time order.
	Late bool
}

// ReadStream returns up to max released events from offset from, and the
// offset to read next. An offset that has left the buffer gives an error
// wrapping ErrOffsetTooOld together with the oldest offset still held.
func (e *Engine) ReadStream(from uint64, max int) ([]StreamEvent, uint64, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if !e.merged.enabled {
		return nil, from, nil
	}
	var out []StreamEvent
	next, err := e.merged.out.read(from, max, func(off uint64, pe *pendingEvent) {
		s, st := &e.series.list[pe.series], &e.streams[pe.stream]
		out = append(out, StreamEvent{
			Offset: off, Device: st.device, Stream: st.id, Seq: pe.seq, Metric: s.name,
			Tags: s.tags, Value: pe.value, Time: ts(pe.t), Late: pe.late,
		})
	})
	return out, next, err
}

// StreamOffsets returns the oldest offset still held and the next offset
// to be written.
func (e *Engine) StreamOffsets() (oldest, next uint64) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.merged.out.oldest(), e.merged.out.next
}
