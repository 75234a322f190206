package aggregate

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
)

// Handing devices over. Hubs that share a fleet own partitions of its
// devices; when a partition moves, the giving hub exports the state of
// that partition's devices (ExportDevices), the taking hub merges it into
// its live engine (ImportDevices), and a hub fenced off a partition
// forgets it (DropDevices).
//
// The invariant that makes this exact: every partial the engine keeps,
// live or in the PartialStore, in every downsampling tier, belongs to one
// series, and a series to one device (device, metric and kept tags are its
// identity). Groups that span devices (group_by=metric, or a tag) exist
// only in queries, which merge the series' partials when they run. So the
// state of a set of devices is exactly their series (with their partials),
// their streams (watermarks), and the records that name those streams
// (pending merged-stream events, the late log, the quarantine); moving it
// moves each device's contribution whole, and any query over the two
// engines' partial sets (QueryPartials) merges the same per-device
// partials a single engine would have merged.
//
// What stays with each engine: the hub clock (processing time only moves
// forward to the exporter's, the hub watermark is the holder's own),
// counters (Stats), the merged stream's already released events, and
// series ids (the importer assigns its own; store keys are rewritten).
// Batch Seq values inside partials (replay guards) are kept: both hubs
// must number batches by the same log.

const (
	handoverMagic   = "EFHND"
	handoverVersion = 1
)

// ErrDeviceHeld is wrapped by the error ImportDevices returns when the
// engine already holds a device of the export.
var ErrDeviceHeld = errors.New("aggregate: device already held")

// memoized asks keep once per device: callers pass a lookup (a partition
// hash) and the engine asks it for every series and stream.
func memoized(keep func(device string) bool) func(device string) bool {
	memo := map[string]bool{}
	return func(dev string) bool {
		v, ok := memo[dev]
		if !ok {
			v = keep(dev)
			memo[dev] = v
		}
		return v
	}
}

// ExportDevices encodes the state of the devices keep selects, in the
// versioned, deterministic form ImportDevices reads: their streams, their
// series with every live and stored partial (every tier), their pending
// merged-stream events, late-log entries and quarantined events. keep is
// called under the engine's read lock, at most once per device. The
// engine is not changed; DropDevices forgets the devices once the export
// is safely elsewhere.
func (e *Engine) ExportDevices(keep func(device string) bool) ([]byte, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	sel := memoized(keep)
	ref := map[uint32]uint32{} // engine stream slot -> export index
	var slots []uint32
	for i := range e.streams {
		if sel(e.streams[i].device) {
			ref[uint32(i)] = uint32(len(slots))
			slots = append(slots, uint32(i))
		}
	}
	lookup := func(si uint32) (uint32, error) {
		x, ok := ref[si]
		if !ok {
			return 0, fmt.Errorf("aggregate: export devices: a partial names stream %d of unselected device %q", si, e.streams[si].device)
		}
		return x, nil
	}
	body := &encoder{b: make([]byte, 0, 1<<12)}
	seriesRef := map[uint32]uint32{}
	var ids []uint32
	for id := range e.series.list {
		if s := &e.series.list[id]; !s.dead && sel(s.device) {
			seriesRef[uint32(id)] = uint32(len(ids))
			ids = append(ids, uint32(id))
		}
	}
	body.uvarint(uint64(len(ids)))
	var scratch encoder
	for _, id := range ids {
		s := &e.series.list[id]
		body.str(s.device)
		body.str(s.name)
		body.tags(s.tags)
		body.varint(s.storedMax)
		body.bool(s.stored)
		body.uvarint(uint64(len(s.parts)))
		for i := range s.parts {
			p := s.parts[i] // a copy: lastStream is renamed
			if p.count > 0 {
				x, err := lookup(p.lastStream)
				if err != nil {
					return nil, err
				}
				p.lastStream = x
			} else {
				p.lastStream = 0
			}
			encodePartial(body, &p)
		}
		var stored []storedEntry
		if s.stored {
			for t := range e.tiers {
				var ferr error
				err := e.opt.Store.Scan(uint8(t), id, math.MinInt64, math.MaxInt64, func(bk int64, data []byte) bool {
					scratch.b = nil
					ferr = remapStored(&scratch, data, lookup)
					if ferr != nil {
						return false
					}
					stored = append(stored, storedEntry{tier: uint8(t), bucket: bk, data: scratch.b})
					return true
				})
				if err == nil {
					err = ferr
				}
				if err != nil {
					return nil, fmt.Errorf("aggregate: export devices: stored partials of device %q metric %q: %w", s.device, s.name, err)
				}
			}
		}
		body.uvarint(uint64(len(stored)))
		for _, en := range stored {
			body.uvarint(uint64(en.tier))
			body.varint(en.bucket)
			body.bytes(en.data)
		}
	}
	var pending []pendingEvent
	if e.merged.enabled {
		for _, pe := range e.merged.sorted() {
			if x, ok := seriesRef[pe.series]; ok {
				pe.series, pe.stream = x, ref[pe.stream]
				pending = append(pending, pe)
			}
		}
	}
	encodeEvents(body, pending)
	var late []lateRec
	for _, r := range e.lateLog.all() {
		if x, ok := ref[r.stream]; ok {
			r.stream = x
			late = append(late, r)
		}
	}
	body.uvarint(uint64(len(late)))
	for _, r := range late {
		encodeLateRec(body, &r)
	}
	var held []*quarRec
	for _, r := range e.quarantine.sorted() {
		if _, ok := ref[r.stream]; ok {
			held = append(held, r)
		}
	}
	body.uvarint(uint64(len(held)))
	for _, r := range held {
		body.uvarint(uint64(ref[r.stream]))
		body.uvarint(r.seq)
		body.str(r.metric)
		body.tags(r.tags)
		body.f64(r.value)
		body.varint(r.t)
		body.varint(r.unc)
		body.varint(r.arrived)
		body.varint(r.key)
		body.bool(r.partials)
	}

	enc := &encoder{b: make([]byte, 0, len(body.b)+64+40*len(slots))}
	enc.b = append(enc.b, handoverMagic...)
	enc.uvarint(handoverVersion)
	enc.varint(e.res)
	enc.f64(e.opt.SketchAccuracy)
	enc.uvarint(uint64(len(e.tiers)))
	for _, t := range e.tiers {
		enc.varint(t.k)
	}
	enc.varint(e.clk.proc)
	enc.uvarint(uint64(len(slots)))
	for _, si := range slots {
		st := &e.streams[si]
		enc.str(st.device)
		enc.b = append(enc.b, st.id[:]...)
		enc.varint(st.wm)
		enc.bool(st.has)
		enc.varint(st.lastArrival)
		enc.bool(st.backlog)
		enc.bool(st.retired)
	}
	enc.b = append(enc.b, body.b...)
	return enc.b, nil
}

func encodeLateRec(enc *encoder, r *lateRec) {
	enc.uvarint(uint64(r.stream))
	enc.uvarint(r.seq)
	enc.str(r.metric)
	enc.tags(r.tags)
	enc.f64(r.value)
	enc.varint(r.t)
	enc.varint(r.arrived)
	enc.varint(r.wmAt)
}

// remapStored re-encodes a stored partial (encodeStored's form) into dst
// with its last stream renamed by ref; the sketch's bytes and the stored
// quantiles are copied as they are.
func remapStored(dst *encoder, data []byte, ref func(uint32) (uint32, error)) error {
	return remapStoredAt(dst, data, ref, 0)
}

// remapStoredAt is remapStored that also sets the partial's batch Seq and
// replay guard to seq when seq is not 0 (ImportDevicesAt).
func remapStoredAt(dst *encoder, data []byte, ref func(uint32) (uint32, error), seq uint64) error {
	d := decoder{b: data}
	var p partial
	skb := decodePartial(&d, nil, &p, false)
	if d.err != nil {
		return d.err
	}
	if seq != 0 {
		p.seq, p.guard = seq, seq
	}
	if len(d.b) != 0 && len(d.b) != 24 {
		return fmt.Errorf("%w: stored partial has %d trailing bytes", ErrCorruptSnapshot, len(d.b))
	}
	if p.count > 0 {
		x, err := ref(p.lastStream)
		if err != nil {
			return err
		}
		p.lastStream = x
	} else {
		p.lastStream = 0
	}
	encodePartialFields(dst, &p)
	dst.bytes(skb)
	dst.b = append(dst.b, d.b...)
	return nil
}

// handover is a decoded, validated export; stream and series references
// are export indexes.
type handover struct {
	proc    int64
	streams []stream
	series  []handoverSeries
	pending []pendingEvent
	late    []lateRec
	held    []*quarRec
	stored  int // stored partials in all series
}

type handoverSeries struct {
	device, metric string
	tags           []Tag
	storedMax      int64
	stored         bool
	parts          []partial
	store          []storedEntry
}

// decodeHandover reads and checks an export against e's configuration;
// it reads only immutable engine fields, so it runs without the lock.
func (e *Engine) decodeHandover(b []byte) (*handover, error) {
	if len(b) < len(handoverMagic) || string(b[:len(handoverMagic)]) != handoverMagic {
		return nil, fmt.Errorf("%w: device handover: bad magic", ErrCorruptSnapshot)
	}
	d := &decoder{b: b[len(handoverMagic):]}
	if v := d.uvarint(); d.err == nil && v != handoverVersion {
		return nil, fmt.Errorf("%w: device handover version %d, this build reads %d", ErrIncompatibleSnapshot, v, handoverVersion)
	}
	res, acc := d.varint(), d.f64()
	var ks []int64
	for n := d.count(1); n > 0; n-- {
		ks = append(ks, d.varint())
	}
	if d.err == nil {
		mine := make([]int64, len(e.tiers))
		for i, t := range e.tiers {
			mine[i] = t.k
		}
		if res != e.res || acc != e.opt.SketchAccuracy || !slices.Equal(ks, mine) {
			return nil, fmt.Errorf("%w: device handover from resolution %v, sketch accuracy %v, tiers %v; this engine has %v, %v, %v",
				ErrIncompatibleSnapshot, res, acc, ks, e.res, e.opt.SketchAccuracy, mine)
		}
	}
	h := &handover{proc: d.varint()}
	h.streams = make([]stream, d.count(21))
	live := map[streamKey]bool{}
	for i := range h.streams {
		st := &h.streams[i]
		st.device = d.str()
		if len(d.b) < len(st.id) {
			d.fail("stream id")
			break
		}
		copy(st.id[:], d.b)
		d.b = d.b[len(st.id):]
		st.wm, st.has, st.lastArrival, st.backlog, st.retired = d.varint(), d.bool(), d.varint(), d.bool(), d.bool()
		if d.err != nil {
			break
		}
		if st.device == "" {
			d.fail("stream device (empty)")
		}
		if st.retired {
			*st = stream{device: st.device, id: st.id, retired: true}
			continue
		}
		k := streamKey{st.device, st.id}
		if live[k] {
			d.fail("stream listed twice")
		}
		live[k] = true
	}
	nstreams := uint32(len(h.streams))
	checkStream := func(si uint32, count uint64, device string) {
		if count == 0 {
			return
		}
		if si >= nstreams {
			d.fail("stream reference")
		} else if h.streams[si].device != device {
			d.fail("stream reference (another device's stream)")
		}
	}
	seen := map[string]bool{}
	var kb strings.Builder
	h.series = make([]handoverSeries, d.count(8))
	for i := range h.series {
		s := &h.series[i]
		s.device, s.metric, s.tags = d.str(), d.str(), d.tags()
		s.storedMax, s.stored = d.varint(), d.bool()
		if d.err != nil {
			break
		}
		if s.device == "" || s.metric == "" {
			d.fail("series device or metric (empty)")
			break
		}
		for j := 1; j < len(s.tags); j++ {
			if s.tags[j-1].Key >= s.tags[j].Key {
				d.fail("series tags (not sorted by key)")
			}
		}
		kb.Reset()
		kb.WriteString(s.device)
		kb.WriteByte(0)
		kb.WriteString(s.metric)
		for _, tg := range s.tags {
			kb.WriteByte(0)
			kb.WriteString(tg.Key)
			kb.WriteByte(0)
			kb.WriteString(tg.Value)
		}
		if seen[kb.String()] {
			d.fail("series listed twice")
		}
		seen[kb.String()] = true
		s.parts = make([]partial, d.count(20))
		for j := range s.parts {
			p := &s.parts[j]
			decodePartial(d, e.sks, p, true)
			if d.err != nil {
				break
			}
			checkStream(p.lastStream, p.count, s.device)
			if j > 0 && p.bucket <= s.parts[j-1].bucket {
				d.fail("partials order")
			}
		}
		s.store = make([]storedEntry, d.count(3))
		for j := range s.store {
			en := &s.store[j]
			tier := d.uvarint()
			en.bucket, en.data = d.varint(), d.bytes()
			if d.err != nil {
				break
			}
			if tier >= uint64(len(e.tiers)) {
				d.fail("stored partial tier")
				break
			}
			en.tier = uint8(tier)
			if j > 0 && (en.tier < s.store[j-1].tier || en.tier == s.store[j-1].tier && en.bucket <= s.store[j-1].bucket) {
				d.fail("stored partials order")
				break
			}
			var p partial
			pd := decoder{b: en.data}
			skb := decodePartial(&pd, nil, &p, false)
			if pd.err != nil || p.bucket != en.bucket || (len(pd.b) != 0 && len(pd.b) != 24) {
				d.fail("stored partial")
				break
			}
			if len(skb) > 0 {
				if _, err := e.sks.decode(skb); err != nil {
					d.fail("stored partial sketch")
					break
				}
			}
			checkStream(p.lastStream, p.count, s.device)
		}
		h.stored += len(s.store)
	}
	h.pending = make([]pendingEvent, d.count(12))
	for i := range h.pending {
		pe := &h.pending[i]
		*pe = pendingEvent{t: d.varint(), seq: d.uvarint(), value: d.f64(),
			series: uint32(d.uvarint()), stream: uint32(d.uvarint()), late: d.bool()}
		if d.err == nil && int(pe.series) >= len(h.series) {
			d.fail("pending event series")
		}
		if d.err == nil {
			checkStream(pe.stream, 1, h.series[pe.series].device)
		}
	}
	h.late = make([]lateRec, d.count(14))
	for i := range h.late {
		r := &h.late[i]
		r.stream, r.seq, r.metric = uint32(d.uvarint()), d.uvarint(), d.str()
		r.tags = d.tags()
		r.value, r.t, r.arrived, r.wmAt = d.f64(), d.varint(), d.varint(), d.varint()
		if d.err == nil && r.stream >= nstreams {
			d.fail("late log stream")
		}
	}
	h.held = make([]*quarRec, d.count(12))
	for i := range h.held {
		r := &quarRec{stream: uint32(d.uvarint()), seq: d.uvarint(), metric: d.str()}
		r.tags = d.tags()
		r.value, r.t, r.unc, r.arrived, r.key, r.partials = d.f64(), d.varint(), d.varint(), d.varint(), d.varint(), d.bool()
		if d.err == nil && (r.stream >= nstreams || h.streams[r.stream].retired) {
			d.fail("quarantined event stream")
		}
		h.held[i] = r
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("trailing bytes")
	}
	if d.err != nil {
		return nil, fmt.Errorf("device handover: %w", d.err)
	}
	return h, nil
}

// devices returns the devices an export holds state of, sorted.
func (h *handover) devices() []string {
	var out []string
	for _, st := range h.streams {
		if !st.retired {
			out = append(out, st.device)
		}
	}
	for _, s := range h.series {
		out = append(out, s.device)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// ImportDevices merges an export (ExportDevices) into the engine. It
// refuses, changing nothing, an export that is corrupt (ErrCorruptSnapshot),
// from an engine of another resolution, sketch accuracy or downsampling
// tiers (ErrIncompatibleSnapshot), that holds a device this engine holds
// (ErrDeviceHeld, naming the device: a partition has one owner, so two
// states of one device are never merged), or that would take the engine
// beyond max_series or max_series_per_device. A failed store write undoes
// the writes before it. After the import, the engine answers for the
// imported devices' series with the same partials the exporter held:
// queries and partial sets over them are the exporter's, exactly, while
// Final, Behind and lateness follow this engine's own watermark.
func (e *Engine) ImportDevices(data []byte) error {
	return e.ImportDevicesAt(data, 0)
}

// ImportDevicesAt is ImportDevices for an engine whose batches are
// numbered by another log than the exporter's (hubs sharing a stream
// each number their own local log): every imported partial, live and
// stored, takes walSeq (the importing log's position of the import) as
// its batch Seq and replay guard, so a batch of this log after walSeq is
// merged and one at or before it (a replay of what preceded the import)
// is not. walSeq 0 keeps the exporter's values (ImportDevices).
func (e *Engine) ImportDevicesAt(data []byte, walSeq uint64) error {
	h, err := e.decodeHandover(data)
	if err != nil {
		return err
	}
	if walSeq != 0 {
		for i := range h.series {
			for j := range h.series[i].parts {
				h.series[i].parts[j].seq, h.series[i].parts[j].guard = walSeq, walSeq
			}
		}
	}
	devs := h.devices()
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.checkImport(h, devs); err != nil {
		return err
	}
	streamBase, seriesBase := uint32(len(e.streams)), uint32(len(e.series.list))
	if err := e.putImported(h, streamBase, seriesBase, walSeq); err != nil {
		return err
	}
	for _, st := range h.streams {
		if st.retired {
			e.streams = append(e.streams, st)
			continue
		}
		si := e.streamFor(st.device, st.id)
		e.streams[si] = st
	}
	t := e.series
	for i := range h.series {
		hs := &h.series[i]
		id := t.add(t.hash(t.deviceHash(hs.device), hs.metric, hs.tags), hs.device, hs.metric, hs.tags)
		s := &t.list[id]
		s.storedMax, s.stored = hs.storedMax, hs.stored
		s.parts = hs.parts
		for j := range s.parts {
			if s.parts[j].count > 0 {
				s.parts[j].lastStream += streamBase
			}
		}
	}
	if e.merged.enabled {
		m := &e.merged
		for _, pe := range h.pending {
			pe.series += seriesBase
			pe.stream += streamBase
			if m.hasReleased && pe.t < m.released {
				pe.late = true
				m.out.push(pe)
				m.moved = true
				continue
			}
			m.push(pe)
		}
		if m.count > e.opt.MaxPending {
			m.forceRelease(e)
		}
	}
	for _, r := range h.late {
		r.stream += streamBase
		e.lateLog.push(r)
	}
	for _, r := range h.held {
		r.stream += streamBase
		if dropped := e.quarantine.add(r); dropped != nil {
			e.stats.quarantineDropped++
		}
	}
	e.clk.advance(h.proc)
	e.live = e.countLive()
	if h.stored > 0 {
		budget := e.maint.budget
		e.maint = newMaintenance(e.opt) // imported stored partials may lie below where sweeps had reached
		e.maint.budget = budget
	}
	return nil
}

// checkImport refuses an export holding a device the engine holds, or
// series beyond the caps. Callers hold mu.
func (e *Engine) checkImport(h *handover, devs []string) error {
	held := map[string]bool{}
	for k := range e.streamIx {
		held[k.device] = true
	}
	for _, dev := range devs {
		if held[dev] || e.series.perDevice[dev] > 0 {
			return fmt.Errorf("%w: device %q is already held by this engine; drop it first", ErrDeviceHeld, dev)
		}
	}
	t := e.series
	if n := len(t.list) - t.dead + len(h.series); n > t.maxSeries {
		return fmt.Errorf("aggregate: import devices: %d series would exceed max_series (%d)", n, t.maxSeries)
	}
	per := map[string]int{}
	for i := range h.series {
		dev := h.series[i].device
		if per[dev]++; per[dev] > t.maxPerDevice {
			return fmt.Errorf("aggregate: import devices: device %q has more than max_series_per_device (%d) series", dev, t.maxPerDevice)
		}
	}
	return nil
}

// putImported writes the imported stored partials under the series ids
// they will have, with their streams renamed; on a failed write it deletes
// what it wrote. Callers hold mu.
func (e *Engine) putImported(h *handover, streamBase, seriesBase uint32, walSeq uint64) error {
	rename := func(si uint32) (uint32, error) { return si + streamBase, nil }
	var enc encoder
	for i := range h.series {
		id := seriesBase + uint32(i)
		for _, en := range h.series[i].store {
			enc.b = nil // the store keeps the slice
			err := remapStoredAt(&enc, en.data, rename, walSeq)
			if err == nil {
				err = e.opt.Store.Put(en.tier, id, en.bucket, enc.b)
			}
			if err != nil {
				e.stats.storeErrors++
				for j := 0; j <= i; j++ {
					for t := range e.tiers {
						_, _ = e.opt.Store.DeleteRange(uint8(t), seriesBase+uint32(j), math.MinInt64, math.MaxInt64)
					}
				}
				return fmt.Errorf("aggregate: import devices: store partial of device %q: %w", h.series[i].device, err)
			}
		}
	}
	return nil
}

// DropDevices forgets the state of the devices keep selects, so that a
// hub fenced off their partition stops answering for them: their series
// (live partials, and stored partials of every tier, deleted from the
// store), their streams (retired: they no longer hold the hub watermark
// back), their pending merged-stream events, late-log entries and
// quarantined events. It returns how many devices it dropped. Store
// deletions that fail are counted as store errors and returned; the
// series are forgotten anyway (their ids are never reused, so what the
// store kept is unreachable). Events of the merged stream already
// released stay readable. Late-log entries after a dropped one move to
// lower offsets' places: the log keeps its next offset and its survivors
// end just before it, so a reader in the middle may read some again.
func (e *Engine) DropDevices(keep func(device string) bool) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	sel := memoized(keep)
	dropped := map[string]bool{}
	var errs []error
	t := e.series
	for id := range t.list {
		s := &t.list[id]
		if s.dead || !sel(s.device) {
			continue
		}
		dropped[s.device] = true
		for i := range s.parts {
			e.sks.put(s.parts[i].sk)
		}
		s.parts = nil
		if s.stored {
			for tier := range e.tiers {
				if _, err := e.opt.Store.DeleteRange(uint8(tier), uint32(id), math.MinInt64, math.MaxInt64); err != nil {
					e.stats.storeErrors++
					errs = append(errs, fmt.Errorf("device %q metric %q: %w", s.device, s.name, err))
				}
			}
		}
		s.stored, s.storedMax, s.dead = false, 0, true
		t.dead++
		if t.perDevice[s.device]--; t.perDevice[s.device] <= 0 {
			delete(t.perDevice, s.device)
		}
		m := &t.metrics[s.metric]
		m.series = slices.DeleteFunc(m.series, func(x uint32) bool { return x == uint32(id) })
	}
	if len(dropped) > 0 {
		t.rehash()
	}
	gone := func(si uint32) bool { return sel(e.streams[si].device) }
	for i := range e.streams {
		st := &e.streams[i]
		if !st.retired && sel(st.device) {
			dropped[st.device] = true
			delete(e.streamIx, streamKey{st.device, st.id})
			*st = stream{device: st.device, id: st.id, retired: true}
		}
	}
	if e.merged.enabled && e.merged.count > 0 {
		all := e.merged.sorted()
		kept := slices.DeleteFunc(slices.Clone(all), func(pe pendingEvent) bool { return t.list[pe.series].dead || gone(pe.stream) })
		if len(kept) != len(all) {
			e.merged.reset(kept)
		}
	}
	recs := e.lateLog.all()
	if kept := slices.DeleteFunc(slices.Clone(recs), func(r lateRec) bool { return gone(r.stream) }); len(kept) != len(recs) {
		next := e.lateLog.next
		e.lateLog = newRing[lateRec](len(e.lateLog.buf))
		e.lateLog.restore(kept, next)
	}
	for _, r := range e.quarantine.sorted() {
		if gone(r.stream) {
			dropped[e.streams[r.stream].device] = true
			e.quarantine.remove(r)
		}
	}
	e.cache.reset()
	e.live = e.countLive()
	return len(dropped), errors.Join(errs...)
}

// addDead appends a dead series (see series.dead), out of the index, its
// metric's list and the device counts.
func (t *seriesTable) addDead(device, metric string, tags []Tag) uint32 {
	m, found := t.metricIdx[metric]
	if !found {
		m = uint32(len(t.metrics))
		t.metricIdx[metric] = m
		t.metrics = append(t.metrics, metricInfo{name: metric})
	}
	t.list = append(t.list, series{metric: m, name: metric, device: device, tags: tags, dead: true})
	t.dead++
	return uint32(len(t.list) - 1)
}
