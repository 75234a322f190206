package aggregate

import (
	"cmp"
	"slices"
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

func cmpPending(a, b pendingEvent) int {
	if c := cmp.Compare(a.t, b.t); c != 0 {
		return c
	}
	if c := cmp.Compare(a.stream, b.stream); c != 0 {
		return c
	}
	return cmp.Compare(a.seq, b.seq)
}

// mergedStream holds events until the hub watermark passes them, then
// releases them in event-time order (ties by stream, then sequence) into a
// bounded ring that readers follow by offset. An event older than what was
// already released is released at once, flagged late.
type mergedStream struct {
	enabled     bool
	pending     []pendingEvent
	released    int64 // events with t < released are out
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
	m.pending = append(m.pending, pe)
	if len(m.pending) > e.opt.MaxPending {
		m.forceRelease(e)
	}
}

// release releases the pending events before wm.
func (m *mergedStream) release(e *Engine, wm int64) {
	ready := 0
	for i := range m.pending {
		if m.pending[i].t < wm {
			m.pending[ready], m.pending[i] = m.pending[i], m.pending[ready]
			ready++
		}
	}
	m.emit(ready)
	if !m.hasReleased || wm > m.released {
		m.released, m.hasReleased = wm, true
	}
}

// emit sorts the first n pending events out into the ring.
func (m *mergedStream) emit(n int) {
	if n == 0 {
		return
	}
	head := m.pending[:n]
	slices.SortFunc(head, cmpPending)
	for _, pe := range head {
		m.out.push(pe)
	}
	m.pending = append(m.pending[:0], m.pending[n:]...)
	m.moved = true
}

// forceRelease releases the older half of a full pending buffer ahead of
// the watermark, so memory stays bounded; later events older than what
// went out are flagged late.
func (m *mergedStream) forceRelease(e *Engine) {
	slices.SortFunc(m.pending, cmpPending)
	half := len(m.pending) / 2
	cut := m.pending[half].t
	n := half
	for n > 0 && m.pending[n-1].t == cut {
		n-- // do not split equal times
	}
	if n == 0 {
		n = half
	}
	e.stats.forced += uint64(n)
	through := m.pending[n-1].t + 1
	m.emit(n)
	if !m.hasReleased || through > m.released {
		m.released, m.hasReleased = through, true
	}
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
