package aggregate

import (
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Engine is the event-time engine. Apply is called by one goroutine (the
// hub's applier); Query, ReadStream, LateEvents, Stats and Snapshot may be
// called concurrently with it.
type Engine struct {
	mu       sync.RWMutex
	opt      Options
	res      int64 // resolution, ns
	sks      *sketches
	windows  []configured
	series   *seriesTable
	streams  []stream
	streamIx map[streamKey]uint32
	clk      clockState
	applies  uint64 // Apply calls so far; numbers late marks
	// applying is the log position (Batch.Seq) whose events are being
	// added, 0 otherwise: the partials it has touched stay live until all
	// are in, so a stored partial never holds part of a batch (its replay
	// guard would skip the rest of that batch's events on reload).
	applying uint64
	stats    counters
	merged   mergedStream
	lateLog  ring[lateRec]
	// quarantine holds events kept out of windows until they may enter.
	quarantine quarantine
	// live counts the partials held in memory (for max_live_partials).
	live int
	// capTried and capFinal: at hub watermark capFinal, roomFor found only
	// partials of windows that are not final live at the cap (no more can
	// be freed before the watermark moves).
	capTried bool
	capFinal int64
	// notice gathers what the current Apply or Tick held back or dropped.
	notice notice
	notes  notifier
	subs   subscribers
	cache  *partCache
	tiers  []tier // storage tiers; tiers[0] is the base resolution
	maint  maintenance
	// coarseGuard passes a downsampled partial's Seq from partialFor to
	// addEvent (Apply's goroutine only).
	coarseGuard uint64
	// queryStoreErrors counts corrupt stored partials queries met (they
	// run under the read lock, so it cannot live in stats).
	queryStoreErrors atomic.Uint64
	// attrs is the device attribute table queries join with (nil: none;
	// see SetAttrSource).
	attrs AttrSource
	// attrsJoined is set on the engines QueryPartials merges sets with:
	// attribute dimensions are tags there (the owners joined them).
	attrsJoined bool
}

// counters are the engine's monotonic counts (see Stats).
type counters struct {
	events, untrusted, invalid, late, tooLate, future uint64
	seriesDropped, replaySkipped, forced, storeErrors uint64
	evicted, reloaded                                 uint64
	downsampled, retentionDeleted, pressureEvicted    uint64
	// quarantined: events held for being beyond future_horizon;
	// heldPartials: held because max_live_partials were live.
	quarantined, heldPartials             uint64
	quarantineReleased, quarantineDropped uint64
	deviceSeriesDropped                   uint64
}

// New returns an engine with opt (defaults filled in, then validated).
func New(opt Options) (*Engine, error) {
	opt.EnsureDefaults()
	if err := opt.Validate(); err != nil {
		return nil, err
	}
	sks, err := newSketches(opt.SketchAccuracy, opt.SketchMaxBins)
	if err != nil {
		return nil, optErr("sketch_accuracy", "%v", err)
	}
	e := &Engine{
		opt: opt, res: int64(opt.Resolution), sks: sks,
		series:     newSeriesTable(opt.TagKeys, opt.MaxSeries, opt.MaxSeriesPerDevice, opt.MaxTagsPerEvent),
		streamIx:   map[streamKey]uint32{},
		clk:        newClockState(),
		lateLog:    newRing[lateRec](opt.LateLogSize),
		quarantine: newQuarantine(opt.QuarantineSize),
		cache:      newPartCache(opt.QueryCachePartials),
		tiers:      newTiers(opt),
		maint:      newMaintenance(opt),
	}
	e.windows = configuredWindows(opt)
	if !opt.DisableMergedStream {
		e.merged = newMergedStream(opt.StreamBuffer)
	}
	return e, nil
}

// Options returns the engine's options with defaults filled in.
func (e *Engine) Options() Options { return e.opt }

// Apply applies one batch. The rest of the batch is applied whatever
// happens to some of its events; the error (joined, one per cause) says
// which were dropped: events of a new series beyond MaxSeries or
// MaxSeriesPerDevice (ErrSeriesLimit), and held events a full quarantine
// dropped (ErrQuarantineFull). Events beyond FutureHorizon, and events
// that need a partial while MaxLivePartials are live, are held in the
// quarantine and enter their windows later: counted, and described by
// Held, not errors. Untrusted, non-finite and too-late events are counted
// (see Stats), not errors.
func (e *Engine) Apply(b *Batch) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.applies++
	e.notice = notice{device: b.Device}
	e.clk.advance(b.ServerTime)
	e.applying = b.Seq
	e.releaseQuarantined(b.Seq)
	si := e.streamFor(b.Device, b.Stream)
	e.streams[si].backlog = b.Backlog
	e.applyEvents(b, si)
	e.applying = 0 // every event of the batch is in: its partials may go
	e.maybeRecompute(false)
	e.flushNotes()
	return e.notice.err(e)
}

// Tick advances processing time to the injected clock's now and
// recomputes the hub watermark, so idle streams are released (and windows
// finalised) even when no batch arrives. It is TickSeq(0).
func (e *Engine) Tick() { _ = e.TickSeq(0) }

// TickSeq is Tick as the effect of log position seq (see Batch.Seq): held
// events whose time has come enter their windows, and seq makes that
// idempotent under log replay. The error is as Apply's, for released
// events that were dropped.
func (e *Engine) TickSeq(seq uint64) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.notice = notice{}
	e.clk.advance(e.opt.Clock().UnixNano())
	e.maybeRecompute(true)
	e.applying = seq
	e.releaseQuarantined(seq) // after the watermark moved and evicted final partials
	e.applying = 0
	e.maintain()
	e.flushNotes()
	return e.notice.err(e)
}

// limits are the bucket thresholds of one Apply: buckets below late are
// in final windows, below tooLate beyond the late horizon.
type limits struct {
	late, tooLate int64
	wm            int64
}

func (e *Engine) limits() limits {
	if !e.clk.hasFinal {
		return limits{late: math.MinInt64, tooLate: math.MinInt64, wm: math.MinInt64}
	}
	base := e.clk.final - int64(e.opt.AllowedLateness)
	return limits{
		late:    floorDiv(base, e.res),
		tooLate: floorDiv(base-int64(e.opt.LateHorizon), e.res),
		wm:      e.clk.final,
	}
}

// applyEvents is the hot path: one series lookup per change of series,
// one partial lookup per event (O(1) for the newest bucket), no
// allocation unless a series or bucket is new.
func (e *Engine) applyEvents(b *Batch, si uint32) {
	st := &e.streams[si]
	lim := e.limits()
	devHash := e.series.deviceHash(b.Device)
	capT := satAdd(b.ServerTime, int64(e.opt.MaxFutureSkew))
	entry := e.entryLimit()
	var prev *Event
	var id uint32
	for i := range b.Events {
		ev := &b.Events[i]
		if !e.admit(ev) {
			continue
		}
		if key := e.entryKey(ev); key > entry {
			e.stats.future++
			e.hold(b, si, ev, key, false)
			continue
		}
		bk := floorDiv(ev.Time, e.res)
		if bk < lim.tooLate {
			e.logTooLate(b, si, ev, lim.wm)
			continue
		}
		if prev == nil || ev.Metric != prev.Metric || !slices.Equal(ev.Tags, prev.Tags) {
			var ok bool
			if id, ok = e.series.lookup(devHash, b.Device, ev.Metric, ev.Tags); !ok {
				e.refuseSeries(b.Device)
				prev = nil
				continue
			}
			prev = ev
		}
		if !e.roomFor(id, bk) {
			// The stream's watermark still moves: windows then become
			// final and their partials can leave memory to make room.
			e.hold(b, si, ev, e.entryKey(ev), true)
			e.advanceStream(st, ev.Time, capT)
			continue
		}
		if !e.addEvent(id, bk, ev, si, b.Seq, lim) {
			e.logTooLate(b, si, ev, lim.wm) // its bucket is downsampled: it cannot merge in
			continue
		}
		e.advanceStream(st, ev.Time, capT)
		if e.merged.enabled {
			e.merged.add(e, ev, id, si)
		}
	}
	if len(b.Events) > 0 {
		st.lastArrival = max(st.lastArrival, b.ServerTime)
	}
}

// admit counts and rejects untrusted and non-finite events.
func (e *Engine) admit(ev *Event) bool {
	switch {
	case ev.Untrusted:
		e.stats.untrusted++
		return false
	case math.IsNaN(ev.Value) || math.IsInf(ev.Value, 0):
		e.stats.invalid++
		return false
	}
	return true
}

// addEvent merges one event into its partial; false when the bucket is
// downsampled and the event is neither merged nor a replay.
func (e *Engine) addEvent(id uint32, bk int64, ev *Event, si uint32, batchSeq uint64, lim limits) bool {
	p := e.partialFor(id, bk)
	if p == nil {
		if batchSeq != 0 && batchSeq <= e.coarseGuard {
			e.stats.replaySkipped++ // already in the downsampled partial
			return true
		}
		return false
	}
	if batchSeq != 0 && batchSeq <= p.guard {
		e.stats.replaySkipped++ // already in the partial reloaded from the store
		return true
	}
	p.observe(ev.Value, ev.Time)
	_ = p.sk.Add(ev.Value) // finite values beyond the mapping's range are only left out of quantiles
	if ev.Time > p.lastT || (ev.Time == p.lastT && e.lastLess(lastKey{p.lastT, p.lastStream, p.lastSeq}, lastKey{ev.Time, si, ev.Seq})) {
		p.lastT, p.lastV, p.lastStream, p.lastSeq = ev.Time, ev.Value, si, ev.Seq
	}
	p.seq = max(p.seq, batchSeq)
	e.stats.events++
	if bk < lim.late {
		p.addLate(lim.wm, e.applies)
		e.stats.late++
		e.notes.revised(e.series.list[id].metric, bk)
	}
	return true
}

// partialFor returns the live partial of series id for bucket bk,
// creating it (or reloading it from the store) when needed. The pointer
// is valid until the series' partials change. It is nil when the bucket
// is covered by a downsampled partial (which no event may change; when
// options are valid only a replay gets here): coarseGuard is then that
// partial's highest batch Seq.
func (e *Engine) partialFor(id uint32, bk int64) *partial {
	s := &e.series.list[id]
	n := len(s.parts)
	if n > 0 && s.parts[n-1].bucket == bk {
		return &s.parts[n-1]
	}
	if (n == 0 || s.parts[n-1].bucket < bk) && !(s.stored && bk <= s.storedMax) {
		// newest bucket and never evicted: no store lookup on the hot path
		s.parts = append(s.parts, partial{})
		e.live++
		p := &s.parts[n]
		p.reset(bk)
		p.sk = e.sks.get()
		return p
	}
	return e.olderPartial(id, s, bk)
}

// olderPartial finds or inserts a partial before the newest one.
func (e *Engine) olderPartial(id uint32, s *series, bk int64) *partial {
	i, found := searchParts(s.parts, bk)
	if found {
		return &s.parts[i]
	}
	var p partial
	if !e.reload(id, s, bk, &p) {
		if len(e.tiers) > 1 && s.stored && bk <= s.storedMax {
			if seq, ok := e.coarseSeq(id, bk); ok {
				e.coarseGuard = seq
				return nil
			}
		}
		p.reset(bk)
		p.sk = e.sks.get()
	}
	s.parts = insertPart(s.parts, i, p)
	e.live++
	return &s.parts[i]
}

// reload reads an evicted partial back from the store; its guard makes
// replayed batches that it already includes skip it.
func (e *Engine) reload(id uint32, s *series, bk int64, p *partial) bool {
	if !s.stored || bk > s.storedMax {
		return false
	}
	data, ok, err := e.opt.Store.Get(0, id, bk)
	if err != nil {
		e.stats.storeErrors++
		return false
	}
	if !ok {
		return false
	}
	d := decoder{b: data}
	decodePartial(&d, e.sks, p, true)
	if d.err != nil {
		e.stats.storeErrors++
		return false
	}
	p.guard = p.seq
	e.stats.reloaded++
	return true
}

func searchParts(parts []partial, bk int64) (int, bool) {
	lo, hi := 0, len(parts)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if parts[m].bucket < bk {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo, lo < len(parts) && parts[lo].bucket == bk
}

func insertPart(parts []partial, i int, p partial) []partial {
	parts = append(parts, partial{})
	copy(parts[i+1:], parts[i:])
	parts[i] = p
	return parts
}

// lastLess orders "last value" candidates: event time, then stream
// identity (device, stream id), then sequence.
func (e *Engine) lastLess(a, b lastKey) bool {
	if a.t != b.t {
		return a.t < b.t
	}
	if a.stream != b.stream {
		sa, sb := &e.streams[a.stream], &e.streams[b.stream]
		if sa.device != sb.device {
			return sa.device < sb.device
		}
		return string(sa.id[:]) < string(sb.id[:])
	}
	return a.seq < b.seq
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// satAdd adds without overflowing.
func satAdd(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	if b < 0 && a < math.MinInt64-b {
		return math.MinInt64
	}
	return a + b
}

func ts(ns int64) time.Time { return time.Unix(0, ns).UTC() }
