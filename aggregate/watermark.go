package aggregate

import (
	"math"
	"slices"
)

// streamKey identifies a stream.
type streamKey struct {
	device string
	id     StreamID
}

// stream is the watermark state of one stream.
type stream struct {
	device      string
	id          StreamID
	wm          int64 // largest event time seen, capped by server time + max_future_skew
	has         bool  // wm is set
	lastArrival int64 // server time of the last batch with events
	backlog     bool  // the last batch reported a backlog
	// retired: the hub retired the stream (RetireStream); the slot keeps
	// its identity for the partials and records that name it.
	retired bool
}

// clockState is processing time and the hub watermark.
type clockState struct {
	proc     int64 // processing time: max of batch server times and ticks
	final    int64 // hub watermark, never decreasing
	hasFinal bool
	lastCalc int64 // proc at the last recomputation
	calced   bool
	evictAt  int64 // eviction bucket limit of the last eviction pass
}

func newClockState() clockState {
	return clockState{proc: math.MinInt64, final: math.MinInt64, evictAt: math.MinInt64}
}

func (c *clockState) advance(now int64) { c.proc = max(c.proc, now) }

// streamFor returns the index of the stream, creating it.
func (e *Engine) streamFor(device string, id StreamID) uint32 {
	k := streamKey{device, id}
	if i, ok := e.streamIx[k]; ok {
		return i
	}
	i := uint32(len(e.streams))
	e.streamIx[k] = i
	e.streams = append(e.streams, stream{device: device, id: id, wm: math.MinInt64})
	return i
}

// advanceStream moves a stream's watermark to t, capped at capT (server
// time + max future skew); capped events are counted as future-stamped.
func (e *Engine) advanceStream(st *stream, t, capT int64) {
	if t > capT {
		e.stats.future++
		t = capT
	}
	if !st.has || t > st.wm {
		st.wm, st.has = t, true
	}
}

// active reports whether a stream holds the hub watermark back.
func (e *Engine) active(st *stream) bool {
	return st.has && !st.backlog && st.lastArrival > e.clk.proc-int64(e.opt.IdleTimeout)
}

// known reports whether a stream still counts for "behind": it sent
// events within the late horizon (processing time).
func (e *Engine) known(st *stream) bool {
	return st.has && st.lastArrival > e.clk.proc-int64(e.opt.LateHorizon)
}

// hubCandidate is the minimum watermark over active streams, or, when no
// stream is active, the maximum over all streams: once everyone is idle
// or draining, everything seen so far is complete. In that case a stream
// counts at most up to its last arrival (server time), so a future-stamped
// stream cannot push the watermark past the present; and since event time
// is corrected to true time, the watermark then also follows processing
// time minus idle_timeout, so the last windows of a quiet fleet close.
func (e *Engine) hubCandidate() (int64, bool) {
	lo, hi := int64(math.MaxInt64), int64(math.MinInt64)
	anyActive, anyStream := false, false
	for i := range e.streams {
		st := &e.streams[i]
		if !st.has {
			continue
		}
		anyStream = true
		hi = max(hi, min(st.wm, st.lastArrival))
		if e.active(st) {
			anyActive = true
			lo = min(lo, st.wm)
		}
	}
	switch {
	case anyActive:
		return lo, true
	case anyStream:
		return max(hi, e.clk.proc-int64(e.opt.IdleTimeout)), true
	}
	return 0, false
}

// maybeRecompute recomputes the hub watermark when watermark_interval of
// processing time has passed (every Apply when it is 1ns; or force), then releases the merged stream,
// announces final windows and evicts old partials.
func (e *Engine) maybeRecompute(force bool) {
	every := int64(e.opt.WatermarkInterval)
	if !force && every > 1 && e.clk.calced && e.clk.proc-e.clk.lastCalc < every {
		return
	}
	e.clk.lastCalc, e.clk.calced = e.clk.proc, true
	cand, ok := e.hubCandidate()
	if !ok || (e.clk.hasFinal && cand <= e.clk.final) {
		return
	}
	first := !e.clk.hasFinal
	e.clk.final, e.clk.hasFinal = cand, true
	if e.merged.enabled {
		e.merged.release(e, cand)
	}
	e.notes.watermark(e, first)
	e.evict()
}

// evict moves final partials older than evict_after into the store,
// series by series, oldest first, then relieves memory pressure.
func (e *Engine) evict() {
	limit := floorDiv(e.clk.final-int64(e.opt.AllowedLateness)-int64(e.opt.EvictAfter), e.res)
	if limit <= e.clk.evictAt {
		return
	}
	e.clk.evictAt = limit
	e.relieve(e.evictBelow(limit))
}

// evictBelow moves every live partial of a bucket below limit into the
// store and returns how many partials stay live. Partials the batch being
// applied has added to stay live (see Engine.applying). A series stops at
// its first failed store write (counted), keeping that partial and the
// later ones live.
func (e *Engine) evictBelow(limit int64) (live int) {
	var enc encoder
	for id := range e.series.list {
		s := &e.series.list[id]
		kept, n := 0, 0 // s.parts[:kept] stay, s.parts[kept:n] went to the store
		for ; n < len(s.parts) && s.parts[n].bucket < limit; n++ {
			if e.applying != 0 && s.parts[n].seq >= e.applying {
				s.parts[kept] = s.parts[n] // the batch being applied added to it
				kept++
				continue
			}
			if !e.put(uint32(id), s, &s.parts[n], &enc) {
				break
			}
		}
		if n > kept {
			s.parts = slices.Delete(s.parts, kept, n) // zeroes the tail
		}
		live += len(s.parts)
	}
	e.live = live
	return live
}

// relieve keeps the live partials within max_live_partials: when more are
// live it evicts final partials before their evict_after, the oldest
// buckets of every series first, down to seven eighths of the cap (so it
// does not run at every bucket). Partials of buckets that are not final
// stay live whatever their number: an event may still change them without
// counting as late. A late event for an evicted partial reloads it, as it
// does after evict_after, so answers do not change; only memory and the
// cost of late events do.
func (e *Engine) relieve(live int) {
	limit := e.opt.MaxLivePartials
	if live <= limit {
		return
	}
	e.relieveTo(live, limit-limit/8)
}

// relieveTo evicts final partials, oldest buckets first, until at most
// target of the live ones are left or no final partial is.
func (e *Engine) relieveTo(live, target int) {
	final := floorDiv(e.clk.final-int64(e.opt.AllowedLateness), e.res) // buckets below it are final
	lo := final
	for i := range e.series.list {
		if ps := e.series.list[i].parts; len(ps) > 0 {
			lo = min(lo, ps[0].bucket)
		}
	}
	// The smallest cut in (lo, final] that leaves at most target live; if
	// none does, every final partial goes.
	below := func(cut int64) int {
		n := 0
		for i := range e.series.list {
			k, _ := searchParts(e.series.list[i].parts, cut)
			n += k
		}
		return n
	}
	cut := final
	for l, h := lo, final; l < h; {
		m := l + (h-l)/2
		if live-below(m) <= target {
			h, cut = m, m
		} else {
			l = m + 1
		}
	}
	left := e.evictBelow(cut)
	if left > target && cut < final {
		// The partials the batch being applied touched stayed: every
		// other final one goes.
		left = e.evictBelow(final)
	}
	e.stats.pressureEvicted += uint64(live - left)
}

// put encodes one partial into the store and recycles its sketch.
func (e *Engine) put(id uint32, s *series, p *partial, enc *encoder) bool {
	enc.b = nil // the store keeps the slice
	encodeStored(enc, p)
	if err := e.opt.Store.Put(0, id, p.bucket, enc.b); err != nil {
		e.stats.storeErrors++
		return false
	}
	e.cache.invalidate(blockKey{0, id, floorDiv(p.bucket, cacheBlockBuckets)})
	if !s.stored || p.bucket > s.storedMax {
		s.storedMax, s.stored = p.bucket, true
	}
	e.sks.put(p.sk)
	e.stats.evicted++
	return true
}
