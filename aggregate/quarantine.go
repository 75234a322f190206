package aggregate

import (
	"cmp"
	"container/heap"
	"slices"
	"time"
)

// Why an event waits in the quarantine.
const (
	// HeldFuture: the event is further ahead of the hub's processing time
	// than future_horizon (its uncertainty credited).
	HeldFuture = "future"
	// HeldPartials: the event needs a new partial while max_live_partials
	// partials of windows that are not final are live.
	HeldPartials = "max_live_partials"
)

// quarRec is one event held in the quarantine.
type quarRec struct {
	off     uint64 // position in the order events entered the quarantine
	stream  uint32
	seq     uint64
	metric  string
	tags    []Tag // canonical (kept, sorted) tags
	value   float64
	t, unc  int64
	arrived int64 // server time of its batch
	// key is the earliest the event may be: t minus its uncertainty
	// (credited up to future_horizon). It may enter its window once
	// processing time + future_horizon reaches key.
	key int64
	// partials: it last waited for max_live_partials rather than for time.
	partials bool
	lo, hi   int // indexes in the two heaps
}

// recBefore orders records by key, then by offset: a total order, so which
// record is released or dropped next does not depend on the heaps' layout.
func recBefore(a, b *quarRec) bool {
	if a.key != b.key {
		return a.key < b.key
	}
	return a.off < b.off
}

// quarantine holds events kept out of windows until they may enter them.
// It is bounded: two heaps over the same records give the next to release
// (smallest key) and the next to drop when full (largest key: the event
// that would wait longest).
type quarantine struct {
	lo   minRecs
	hi   maxRecs
	next uint64 // offset of the next record
	size int
}

func newQuarantine(size int) quarantine { return quarantine{size: size} }

func (q *quarantine) len() int { return len(q.lo) }

// add inserts r (its offset assigned here) and returns the record dropped
// to stay within size, if any: r itself when it would wait longest.
func (q *quarantine) add(r *quarRec) (dropped *quarRec) {
	r.off = q.next
	q.next++
	if len(q.lo) >= q.size {
		last := q.hi[0]
		if recBefore(last, r) {
			return r
		}
		q.remove(last)
		dropped = last
	}
	heap.Push(&q.lo, r)
	heap.Push(&q.hi, r)
	return dropped
}

// first returns the record with the smallest key, or nil.
func (q *quarantine) first() *quarRec {
	if len(q.lo) == 0 {
		return nil
	}
	return q.lo[0]
}

func (q *quarantine) remove(r *quarRec) {
	heap.Remove(&q.lo, r.lo)
	heap.Remove(&q.hi, r.hi)
}

// sorted returns the held records in offset order.
func (q *quarantine) sorted() []*quarRec {
	out := slices.Clone([]*quarRec(q.lo))
	slices.SortFunc(out, cmpOff)
	return out
}

func cmpOff(a, b *quarRec) int { return cmp.Compare(a.off, b.off) }

// restore refills an empty quarantine (records keep their offsets).
func (q *quarantine) restore(recs []*quarRec, next uint64) {
	q.lo, q.hi, q.next = nil, nil, next
	for _, r := range recs {
		heap.Push(&q.lo, r)
		heap.Push(&q.hi, r)
	}
}

// minRecs is a heap of records, smallest key first.
type minRecs []*quarRec

func (h minRecs) Len() int           { return len(h) }
func (h minRecs) Less(i, j int) bool { return recBefore(h[i], h[j]) }
func (h minRecs) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].lo, h[j].lo = i, j
}
func (h *minRecs) Push(x any) { r := x.(*quarRec); r.lo = len(*h); *h = append(*h, r) }
func (h *minRecs) Pop() any {
	old := *h
	r := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return r
}

// maxRecs is a heap of records, largest key first.
type maxRecs []*quarRec

func (h maxRecs) Len() int           { return len(h) }
func (h maxRecs) Less(i, j int) bool { return recBefore(h[j], h[i]) }
func (h maxRecs) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].hi, h[j].hi = i, j
}
func (h *maxRecs) Push(x any) { r := x.(*quarRec); r.hi = len(*h); *h = append(*h, r) }
func (h *maxRecs) Pop() any {
	old := *h
	r := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return r
}

// entryKey is the earliest time ev may be: its time minus its uncertainty,
// the uncertainty credited up to future_horizon (a device cannot claim its
// way past the horizon with a huge uncertainty).
func (e *Engine) entryKey(ev *Event) int64 {
	u := min(max(ev.Uncertainty, 0), int64(e.opt.FutureHorizon))
	return satAdd(ev.Time, -u)
}

// entryLimit is the largest key that may enter windows now.
func (e *Engine) entryLimit() int64 { return satAdd(e.clk.proc, int64(e.opt.FutureHorizon)) }

// hold puts an event of batch b (stream si) into the quarantine; partials
// says it waits for max_live_partials rather than for time.
func (e *Engine) hold(b *Batch, si uint32, ev *Event, key int64, partials bool) {
	r := &quarRec{stream: si, seq: ev.Seq, metric: ev.Metric, tags: slices.Clone(e.series.canonical(ev.Tags)),
		value: ev.Value, t: ev.Time, unc: ev.Uncertainty, arrived: b.ServerTime, key: key, partials: partials}
	if partials {
		e.stats.heldPartials++
		e.notice.heldPartials++
	} else {
		e.stats.quarantined++
		e.notice.quarantined++
	}
	if d := e.quarantine.add(r); d != nil {
		e.stats.quarantineDropped++
		e.notice.dropped++
		e.notice.droppedDevice = e.streams[d.stream].device
	}
}

// releaseQuarantined lets held events whose time has come into their
// windows, smallest key first, as effects of log position seq (see
// Batch.Seq); it stops at the first event that still finds no room for a
// new partial.
func (e *Engine) releaseQuarantined(seq uint64) {
	limit := e.entryLimit()
	for r := e.quarantine.first(); r != nil && r.key <= limit; r = e.quarantine.first() {
		if !e.enter(r, seq) {
			return
		}
		e.quarantine.remove(r)
		e.stats.quarantineReleased++
	}
}

// enter applies a held event as if it arrived at log position seq; false
// when it needs a new partial and there is no room (it stays held).
func (e *Engine) enter(r *quarRec, seq uint64) bool {
	st := &e.streams[r.stream]
	ev := Event{Seq: r.seq, Metric: r.metric, Tags: r.tags, Value: r.value, Time: r.t, Uncertainty: r.unc}
	lim := e.limits()
	bk := floorDiv(ev.Time, e.res)
	if bk < lim.tooLate {
		e.logTooLateAt(r.arrived, r.stream, &ev, lim.wm)
		return true
	}
	id, ok := e.series.lookup(e.series.deviceHash(st.device), st.device, ev.Metric, ev.Tags)
	if !ok {
		e.refuseSeries(st.device)
		return true
	}
	if !e.roomFor(id, bk) {
		r.partials = true
		return false
	}
	if !e.addEvent(id, bk, &ev, r.stream, seq, lim) {
		e.logTooLateAt(r.arrived, r.stream, &ev, lim.wm)
		return true
	}
	e.advanceStream(st, ev.Time, satAdd(e.clk.proc, int64(e.opt.MaxFutureSkew)))
	if e.merged.enabled {
		e.merged.add(e, &ev, id, r.stream)
	}
	return true
}

// QuarantinedEvent is an event held out of every window: it was further
// ahead of the hub's time than future_horizon, or needed a new partial
// while max_live_partials were live. It enters its window when the hub's
// time reaches it (and there is room), unless the quarantine drops it.
type QuarantinedEvent struct {
	// Offset is the event's position in the order events were held.
	Offset uint64
	Device string
	Stream StreamID
	Seq    uint64
	Metric string
	Tags   []Tag
	Value  float64
	// Time is the event time and Uncertainty its half-width; Arrived the
	// batch's server time; EntersAt the hub processing time from which
	// it may enter its window.
	Time, Arrived, EntersAt time.Time
	Uncertainty             time.Duration
	// Reason is HeldFuture or HeldPartials.
	Reason string
}

// QuarantineQuery selects held events.
type QuarantineQuery struct {
	// From is the smallest offset returned.
	From uint64
	// Max caps the events returned.
	Max int
	// Device, when set, keeps only that device's events.
	Device string
}

// Quarantined returns up to q.Max held events with an offset of at least
// q.From, in offset order, and the offset to ask for next.
func (e *Engine) Quarantined(q QuarantineQuery) ([]QuarantinedEvent, uint64) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	var out []QuarantinedEvent
	next := max(q.From, e.quarantine.next)
	for _, r := range e.quarantine.sorted() {
		st := &e.streams[r.stream]
		if r.off < q.From || (q.Device != "" && st.device != q.Device) {
			continue
		}
		if len(out) == q.Max {
			next = r.off
			break
		}
		reason := HeldFuture
		if r.partials {
			reason = HeldPartials
		}
		out = append(out, QuarantinedEvent{
			Offset: r.off, Device: st.device, Stream: st.id, Seq: r.seq, Metric: r.metric, Tags: r.tags,
			Value: r.value, Time: ts(r.t), Uncertainty: time.Duration(r.unc), Arrived: ts(r.arrived),
			EntersAt: ts(satAdd(r.key, -int64(e.opt.FutureHorizon))), Reason: reason,
		})
	}
	return out, next
}

func (e *Engine) encodeQuarantine(enc *encoder) {
	recs := e.quarantine.sorted()
	enc.uvarint(uint64(len(recs)))
	for _, r := range recs {
		enc.uvarint(r.off)
		enc.uvarint(uint64(r.stream))
		enc.uvarint(r.seq)
		enc.str(r.metric)
		enc.tags(r.tags)
		enc.f64(r.value)
		enc.varint(r.t)
		enc.varint(r.unc)
		enc.varint(r.arrived)
		enc.varint(r.key)
		enc.bool(r.partials)
	}
	enc.uvarint(e.quarantine.next)
	c := &e.stats
	for _, v := range []uint64{c.quarantined, c.heldPartials, c.quarantineReleased, c.quarantineDropped, c.deviceSeriesDropped} {
		enc.uvarint(v)
	}
	enc.bool(e.capTried)
	enc.varint(e.capFinal)
}

func (e *Engine) decodeQuarantine(d *decoder) {
	recs := make([]*quarRec, d.count(12))
	prev := uint64(0)
	for i := range recs {
		r := &quarRec{off: d.uvarint(), stream: uint32(d.uvarint()), seq: d.uvarint(), metric: d.str()}
		r.tags = d.tags()
		r.value, r.t, r.unc, r.arrived, r.key, r.partials = d.f64(), d.varint(), d.varint(), d.varint(), d.varint(), d.bool()
		switch {
		case d.err != nil:
		case int(r.stream) >= len(e.streams):
			d.fail("quarantine stream")
		case i > 0 && r.off <= prev:
			d.fail("quarantine offset order")
		}
		prev = r.off
		recs[i] = r
	}
	next := d.uvarint()
	c := &e.stats
	for _, p := range []*uint64{&c.quarantined, &c.heldPartials, &c.quarantineReleased, &c.quarantineDropped, &c.deviceSeriesDropped} {
		*p = d.uvarint()
	}
	e.capTried, e.capFinal = d.bool(), d.varint()
	if d.err == nil && len(recs) > 0 && next <= recs[len(recs)-1].off {
		d.fail("quarantine next offset")
	}
	if d.err == nil {
		// A smaller quarantine_size than the snapshot's keeps the events
		// that would wait least, as add would have.
		if len(recs) > e.opt.QuarantineSize {
			keep := slices.Clone(recs)
			slices.SortFunc(keep, func(a, b *quarRec) int {
				if recBefore(a, b) {
					return -1
				}
				return 1
			})
			e.stats.quarantineDropped += uint64(len(keep) - e.opt.QuarantineSize)
			keep = keep[:e.opt.QuarantineSize]
			slices.SortFunc(keep, cmpOff)
			recs = keep
		}
		e.quarantine.restore(recs, next)
	}
}
