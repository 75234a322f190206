package aggregate

import (
	"bytes"
	"fmt"
	"math"
)

// Snapshot versions: 2 added the quarantine (after the late log); a
// version 1 snapshot restores with an empty one. 3 added each stream's
// retired flag (RetireStream); older snapshots have none retired. 4
// added each series' dead flag (DropDevices); older snapshots have none
// dead.
const (
	snapshotMagic   = "EFAGG"
	snapshotVersion = 4
)

// Snapshot encodes the engine's whole state (and a Snapshotter store's
// content) deterministically: the same state gives the same bytes.
// Subscriptions are not part of it.
func (e *Engine) Snapshot() ([]byte, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	enc := &encoder{b: make([]byte, 0, 1<<16)}
	enc.b = append(enc.b, snapshotMagic...)
	enc.uvarint(snapshotVersion)
	enc.varint(e.res)
	enc.f64(e.opt.SketchAccuracy)
	e.encodeClock(enc)
	e.encodeStreams(enc)
	e.encodeSeries(enc)
	e.encodeMerged(enc)
	e.encodeLateLog(enc)
	e.encodeQuarantine(enc)
	e.encodeStore(enc)
	return enc.b, nil
}

// Restore replaces the engine's state with a snapshot's. On error the
// engine is unchanged. A snapshot from another resolution or sketch
// accuracy gives ErrIncompatibleSnapshot; rebuild from the log instead.
func (e *Engine) Restore(snapshot []byte) error {
	n, err := New(e.opt)
	if err != nil {
		return err
	}
	store, err := n.decode(snapshot)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := restoreStore(e.opt.Store, store); err != nil {
		return err
	}
	e.cache.reset()
	budget := e.maint.budget
	e.maint = newMaintenance(e.opt) // sweeps restart from the oldest bucket
	e.maint.budget = budget
	e.series, e.streams, e.streamIx = n.series, n.streams, n.streamIx
	e.clk, e.applies, e.stats = n.clk, n.applies, n.stats
	e.merged, e.lateLog, e.windows = n.merged, n.lateLog, n.windows
	e.quarantine, e.capTried, e.capFinal = n.quarantine, n.capTried, n.capFinal
	e.live = e.countLive()
	return nil
}

type storedEntry struct {
	tier   uint8
	series uint32
	bucket int64
	data   []byte
}

func restoreStore(s PartialStore, entries []storedEntry) error {
	if sn, ok := s.(Snapshotter); ok {
		sn.Reset()
	}
	for _, en := range entries {
		if err := s.Put(en.tier, en.series, en.bucket, en.data); err != nil {
			return fmt.Errorf("restore partial store: %w", err)
		}
	}
	return nil
}

// decode fills a fresh engine from a snapshot.
func (e *Engine) decode(b []byte) ([]storedEntry, error) {
	if len(b) < len(snapshotMagic) || string(b[:len(snapshotMagic)]) != snapshotMagic {
		return nil, fmt.Errorf("%w: bad magic", ErrCorruptSnapshot)
	}
	d := &decoder{b: b[len(snapshotMagic):]}
	v := d.uvarint()
	if d.err == nil && (v < 1 || v > snapshotVersion) {
		return nil, fmt.Errorf("%w: version %d, want 1 to %d", ErrIncompatibleSnapshot, v, snapshotVersion)
	}
	res, acc := d.varint(), d.f64()
	if d.err == nil && (res != e.res || acc != e.opt.SketchAccuracy) {
		return nil, fmt.Errorf("%w: resolution %v and sketch accuracy %v, engine has %v and %v",
			ErrIncompatibleSnapshot, res, acc, e.opt.Resolution, e.opt.SketchAccuracy)
	}
	e.decodeClock(d)
	e.decodeStreams(d, v)
	e.decodeSeries(d, v)
	e.decodeMerged(d)
	e.decodeLateLog(d)
	if v >= 2 {
		e.decodeQuarantine(d)
	}
	store := decodeStore(d)
	if d.err == nil && len(d.b) != 0 {
		d.fail("trailing bytes")
	}
	return store, d.err
}

func (e *Engine) counterFields() []*uint64 {
	c := &e.stats
	return []*uint64{&c.events, &c.untrusted, &c.invalid, &c.late, &c.tooLate, &c.future,
		&c.seriesDropped, &c.replaySkipped, &c.forced, &c.storeErrors, &c.evicted, &c.reloaded}
}

func (e *Engine) encodeClock(enc *encoder) {
	c := &e.clk
	enc.varint(c.proc)
	enc.varint(c.final)
	enc.bool(c.hasFinal)
	enc.varint(c.lastCalc)
	enc.bool(c.calced)
	enc.varint(c.evictAt)
	enc.uvarint(e.applies)
	for _, f := range e.counterFields() {
		enc.uvarint(*f)
	}
	enc.uvarint(uint64(len(e.windows)))
	for _, w := range e.windows {
		enc.str(w.name)
		enc.varint(w.next)
	}
}

func (e *Engine) decodeClock(d *decoder) {
	c := &e.clk
	c.proc, c.final, c.hasFinal = d.varint(), d.varint(), d.bool()
	c.lastCalc, c.calced, c.evictAt = d.varint(), d.bool(), d.varint()
	e.applies = d.uvarint()
	for _, f := range e.counterFields() {
		*f = d.uvarint()
	}
	for n := d.count(2); n > 0; n-- {
		name, next := d.str(), d.varint()
		for i := range e.windows {
			if e.windows[i].name == name {
				e.windows[i].next = next
			}
		}
	}
}

func (e *Engine) encodeStreams(enc *encoder) {
	enc.uvarint(uint64(len(e.streams)))
	for _, st := range e.streams {
		enc.str(st.device)
		enc.b = append(enc.b, st.id[:]...)
		enc.varint(st.wm)
		enc.bool(st.has)
		enc.varint(st.lastArrival)
		enc.bool(st.backlog)
		enc.bool(st.retired)
	}
}

func (e *Engine) decodeStreams(d *decoder, version uint64) {
	for n := d.count(20); n > 0 && d.err == nil; n-- {
		device := d.str()
		var id StreamID
		if len(d.b) < len(id) {
			d.fail("stream id")
			return
		}
		copy(id[:], d.b)
		d.b = d.b[len(id):]
		wm, has, last, backlog := d.varint(), d.bool(), d.varint(), d.bool()
		if version >= 3 && d.bool() {
			// A retired slot is kept for its identity, out of the index.
			e.streams = append(e.streams, stream{device: device, id: id, retired: true})
			continue
		}
		if _, dup := e.streamIx[streamKey{device, id}]; dup {
			d.fail("stream listed twice")
			return
		}
		si := e.streamFor(device, id)
		st := &e.streams[si]
		st.wm, st.has, st.lastArrival, st.backlog = wm, has, last, backlog
	}
}

func (e *Engine) encodeSeries(enc *encoder) { e.encodeSeriesVersion(enc, snapshotVersion) }

// encodeSeriesVersion writes the series as snapshot version wrote them
// (versions before 4 have no dead flag; tests write old snapshots with it).
func (e *Engine) encodeSeriesVersion(enc *encoder, version uint64) {
	enc.uvarint(uint64(len(e.series.list)))
	for i := range e.series.list {
		s := &e.series.list[i]
		enc.str(s.device)
		enc.str(s.name)
		enc.tags(s.tags)
		enc.varint(s.storedMax)
		enc.bool(s.stored)
		if version >= 4 {
			enc.bool(s.dead)
		}
		enc.uvarint(uint64(len(s.parts)))
		for j := range s.parts {
			encodePartial(enc, &s.parts[j])
		}
	}
}

func (e *Engine) decodeSeries(d *decoder, version uint64) {
	t := e.series
	for n := d.count(5); n > 0 && d.err == nil; n-- {
		device, metric, tags := d.str(), d.str(), d.tags()
		storedMax, stored := d.varint(), d.bool()
		var id uint32
		if version >= 4 && d.bool() {
			id = t.addDead(device, metric, tags)
		} else {
			id = t.add(0, device, metric, tags)
		}
		s := &t.list[id]
		s.storedMax, s.stored = storedMax, stored
		s.parts = make([]partial, d.count(20))
		for i := range s.parts {
			decodePartial(d, e.sks, &s.parts[i], true)
		}
		if s.dead && len(s.parts) > 0 {
			d.fail("dead series with partials")
		}
	}
	if d.err == nil {
		t.rehash()
	}
}

func (e *Engine) encodeMerged(enc *encoder) {
	m := &e.merged
	enc.bool(m.enabled)
	enc.varint(m.released)
	enc.bool(m.hasReleased)
	encodeEvents(enc, m.sorted()) // canonical: the order they will be released in
	encodeEvents(enc, m.out.all())
	enc.uvarint(m.out.next)
}

func encodeEvents(enc *encoder, evs []pendingEvent) {
	enc.uvarint(uint64(len(evs)))
	for _, pe := range evs {
		enc.varint(pe.t)
		enc.uvarint(pe.seq)
		enc.f64(pe.value)
		enc.uvarint(uint64(pe.series))
		enc.uvarint(uint64(pe.stream))
		enc.bool(pe.late)
	}
}

func (e *Engine) decodeEvents(d *decoder) []pendingEvent {
	out := make([]pendingEvent, d.count(12))
	for i := range out {
		out[i] = pendingEvent{t: d.varint(), seq: d.uvarint(), value: d.f64(),
			series: uint32(d.uvarint()), stream: uint32(d.uvarint()), late: d.bool()}
		if d.err == nil && (int(out[i].series) >= len(e.series.list) || int(out[i].stream) >= len(e.streams)) {
			d.fail("event reference")
		}
	}
	return out
}

func (e *Engine) decodeMerged(d *decoder) {
	enabled := d.bool()
	released, has := d.varint(), d.bool()
	pending := e.decodeEvents(d)
	out := e.decodeEvents(d)
	next := d.uvarint()
	if d.err != nil || !enabled || !e.merged.enabled {
		return // a snapshot without the stream restores into one with it empty, and vice versa
	}
	if next < uint64(len(out)) {
		d.fail("stream offset")
		return
	}
	m := &e.merged
	m.released, m.hasReleased = released, has
	m.reset(pending)
	m.out.restore(out, next)
}

func (e *Engine) encodeLateLog(enc *encoder) {
	recs := e.lateLog.all()
	enc.uvarint(uint64(len(recs)))
	for i := range recs {
		encodeLateRec(enc, &recs[i])
	}
	enc.uvarint(e.lateLog.next)
}

func (e *Engine) decodeLateLog(d *decoder) {
	recs := make([]lateRec, d.count(14))
	for i := range recs {
		r := &recs[i]
		r.stream, r.seq, r.metric = uint32(d.uvarint()), d.uvarint(), d.str()
		r.tags = d.tags()
		r.value, r.t, r.arrived, r.wmAt = d.f64(), d.varint(), d.varint(), d.varint()
		if d.err == nil && int(r.stream) >= len(e.streams) {
			d.fail("late log stream")
		}
	}
	next := d.uvarint()
	if d.err == nil && next < uint64(len(recs)) {
		d.fail("late log offset")
	}
	if d.err == nil {
		e.lateLog.restore(recs, next)
	}
}

func (e *Engine) encodeStore(enc *encoder) {
	sn, ok := e.opt.Store.(Snapshotter)
	enc.bool(ok)
	if !ok {
		return
	}
	var entries []storedEntry
	sn.SnapshotTo(func(tier uint8, series uint32, bucket int64, data []byte) {
		entries = append(entries, storedEntry{tier, series, bucket, data})
	})
	enc.uvarint(uint64(len(entries)))
	for _, en := range entries {
		// The tier rides above the series id's 32 bits, so snapshots
		// without downsampled partials keep their earlier encoding.
		enc.uvarint(uint64(en.tier)<<32 | uint64(en.series))
		enc.varint(en.bucket)
		enc.bytes(en.data)
	}
}

func decodeStore(d *decoder) []storedEntry {
	if !d.bool() {
		return nil
	}
	out := make([]storedEntry, d.count(3))
	for i := range out {
		s := d.uvarint()
		if s>>32 > math.MaxUint8 {
			d.fail("store series")
		}
		out[i] = storedEntry{tier: uint8(s >> 32), series: uint32(s), bucket: d.varint(), data: bytes.Clone(d.bytes())}
	}
	return out
}
