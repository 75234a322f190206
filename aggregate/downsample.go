package aggregate

import (
	"math"
	"time"
)

// Downsampling keeps the store bounded on a long-lived hub: stored
// partials older than a tier's After (by the hub watermark) are merged into
// partials of the tier's resolution, which replace them in one atomic
// PartialStore.Replace, and partials older than PartialsRetention are
// deleted. Because every After exceeds allowed_lateness + late_horizon +
// evict_after, a partial is downsampled only once no event can change it.
//
// Which data may be downsampled is a function of the hub watermark alone
// (tierCut), not of how far maintenance got: queries validate windows and
// choose the tiers they read by it, so an answer does not depend on when
// the maintenance passes ran.

// maxTiers bounds Options.Downsample (tiers are a byte in store keys).
const maxTiers = 8

// maintainBudget is the work one maintenance pass may do, in partials read
// or deleted plus series visited, so that Tick (which holds the engine's
// lock) stays short; a pass that runs out resumes at the next Tick.
const maintainBudget = 10_000

// maxChunkPartials and maxChunkBytes bound one Replace (rounded up to
// whole coarse partials), so that a store can commit it in one
// transaction.
const (
	maxChunkPartials = 4096
	maxChunkBytes    = 2 << 20
)

// tier is one storage tier: tier 0 is the base resolution.
type tier struct {
	k     int64 // base buckets per partial of this tier
	after int64 // ns; 0 for tier 0
}

// sweep is one pass over every series towards a target bucket.
type sweep struct {
	done   int64 // every series is processed below this bucket
	target int64 // the running sweep's goal
	active bool
	series int   // cursor: the series being processed
	bucket int64 // cursor: where that series resumes
}

// maintenance is the state of downsampling and retention. It is not part
// of the snapshot: after a restore sweeps start over from the oldest
// bucket, which finds the work already done quickly.
type maintenance struct {
	every  int64 // processing time between passes
	budget int
	last   int64
	ran    bool
	more   bool    // the last pass ran out of budget
	failed bool    // the last pass stopped on a store error
	down   []sweep // down[t-1] is tier t's
	ret    sweep
}

func newTiers(opt Options) []tier {
	ts := []tier{{k: 1}}
	for _, d := range opt.Downsample {
		ts = append(ts, tier{k: int64(d.Resolution / opt.Resolution), after: int64(d.After)})
	}
	return ts
}

func newMaintenance(opt Options) maintenance {
	m := maintenance{every: int64(time.Minute), budget: maintainBudget, down: make([]sweep, len(opt.Downsample))}
	if len(opt.Downsample) > 0 {
		m.every = int64(opt.Downsample[0].Resolution)
	}
	for i := range m.down {
		m.down[i].done = math.MinInt64
	}
	m.ret.done = math.MinInt64
	return m
}

// alignDown rounds a bucket down to a multiple of k.
func alignDown(b, k int64) int64 { return floorDiv(b, k) * k }

// tierCut is the bucket below which partials may be in tier t or deeper:
// whole tier-t buckets that ended at least After before the watermark.
func (e *Engine) tierCut(t int) int64 {
	if !e.clk.hasFinal || t >= len(e.tiers) {
		return math.MinInt64
	}
	tr := e.tiers[t]
	return floorDiv(e.clk.final-tr.after, e.res*tr.k) * tr.k
}

// retentionCut is the bucket below which partials are deleted, aligned to
// the coarsest tier so that only whole partials go.
func (e *Engine) retentionCut() int64 {
	if !e.clk.hasFinal || e.opt.PartialsRetention == 0 {
		return math.MinInt64
	}
	k := e.tiers[len(e.tiers)-1].k
	return floorDiv(e.clk.final-int64(e.opt.PartialsRetention), e.res*k) * k
}

// deepestTier is the deepest tier holding data at or after bucket b0 (0:
// none downsampled).
func (e *Engine) deepestTier(b0 int64) int {
	for t := len(e.tiers) - 1; t > 0; t-- {
		if b0 < e.tierCut(t) {
			return t
		}
	}
	return 0
}

// checkDownsampled rejects a window that cannot be evaluated exactly over
// the downsampled part of its range: its size and slide (or gap) must be
// multiples of the resolution kept there.
func (e *Engine) checkDownsampled(p *queryPlan) error {
	t := e.deepestTier(p.b0)
	if t == 0 {
		return nil
	}
	coarse := time.Duration(e.tiers[t].k * e.res)
	ok := p.spec.Size%coarse == 0 && p.spec.Slide%coarse == 0
	later := ts(e.tierCut(1) * e.res)
	if p.spec.Kind == Session {
		ok = p.spec.Gap >= coarse
		later = later.Add(p.spec.Gap)
	}
	if ok {
		return nil
	}
	d := e.opt.Downsample[t-1]
	return paramErr("window", "%v is finer than the %v resolution kept for data older than %v (before %s): "+
		"use a window whose size and slide (or session gap) are multiples of %v, or a from at or after %s",
		p.spec, coarse, d.After, ts(e.tierCut(t)*e.res).Format(time.RFC3339), coarse, later.Format(time.RFC3339))
}

// maintain runs one bounded maintenance pass, at most once per every of
// processing time unless the last one ran out of budget.
func (e *Engine) maintain() {
	m := &e.maint
	if len(m.down) == 0 && e.opt.PartialsRetention == 0 || !e.clk.hasFinal {
		return
	}
	if m.ran && !m.more && e.clk.proc-m.last < m.every {
		return
	}
	m.last, m.ran, m.failed = e.clk.proc, true, false
	budget := m.budget
	done := true
	for t := 1; t < len(e.tiers) && done; t++ {
		done = e.sweepTier(t, &budget)
	}
	if done {
		done = e.sweepRetention(&budget)
	}
	m.more = !done && !m.failed
}

// sweepTier moves tier t-1 partials below tier t's cut into tier t; it
// reports whether the sweep is complete (false: out of budget or failed).
// Tier t only reads below tier t-1's completed sweep, so it never meets
// tier t-2 data that tier t-1 has still to merge.
func (e *Engine) sweepTier(t int, budget *int) bool {
	sw := &e.maint.down[t-1]
	if !sw.active {
		target := e.tierCut(t)
		if t > 1 {
			prev := e.maint.down[t-2].done
			if prev == math.MinInt64 {
				return true // the finer tier has not finished a sweep yet
			}
			target = min(target, alignDown(prev, e.tiers[t].k))
		}
		if target <= sw.done {
			return true
		}
		*sw = sweep{done: sw.done, target: target, active: true, bucket: sw.done}
	}
	for sw.series < len(e.series.list) {
		s := &e.series.list[sw.series]
		if s.stored && sw.bucket <= s.storedMax {
			next, ok := e.downsampleSeries(t, uint32(sw.series), sw.bucket, sw.target, budget)
			sw.bucket = next
			if !ok {
				return false
			}
		}
		sw.series++
		sw.bucket = sw.done
		if *budget--; *budget <= 0 {
			return false
		}
	}
	sw.done, sw.active = sw.target, false
	return true
}

// downsampleSeries merges one series' tier t-1 partials in [from, to)
// into tier t, chunk by chunk, while the budget lasts. It returns where
// the series resumes and whether it is done. A corrupt source partial is
// counted as a store error and dropped (queries already leave it out).
func (e *Engine) downsampleSeries(t int, id uint32, from, to int64, budget *int) (int64, bool) {
	k, src := e.tiers[t].k, uint8(t-1)
	for {
		chunk, size := max(min(*budget, maxChunkPartials), 1), 0
		var fine []partial
		stop, stopped := to, false
		err := e.opt.Store.Scan(src, id, from, to, func(bk int64, data []byte) bool {
			if (len(fine) >= chunk || size >= maxChunkBytes) && alignDown(bk, k) != alignDown(fine[len(fine)-1].bucket, k) {
				stop, stopped = alignDown(bk, k), true
				return false
			}
			size += len(data)
			var p partial
			d := decoder{b: data}
			decodePartial(&d, e.sks, &p, true)
			if d.err != nil {
				e.stats.storeErrors++
				return true
			}
			fine = append(fine, p)
			return true
		})
		if err != nil {
			e.stats.storeErrors++
			e.maint.failed = true
			return from, false
		}
		*budget -= len(fine)
		if len(fine) > 0 {
			if !e.replaceChunk(t, id, from, stop, fine) {
				e.maint.failed = true
				return from, false
			}
		}
		from = stop
		if !stopped {
			return to, true
		}
		if *budget <= 0 {
			return from, false
		}
	}
}

// replaceChunk merges fine (sorted) into tier t partials, merging in any
// tier t partial already stored for the same span, and replaces the tier
// t-1 partials of [lo, hi) with them in one atomic Replace.
func (e *Engine) replaceChunk(t int, id uint32, lo, hi int64, fine []partial) bool {
	k := e.tiers[t].k
	var coarse []partial
	for i := range fine {
		b := alignDown(fine[i].bucket, k)
		if n := len(coarse); n == 0 || coarse[n-1].bucket != b {
			coarse = append(coarse, partial{})
			coarse[n].reset(b)
		}
		c := &coarse[len(coarse)-1]
		e.merge(c, &fine[i], true)
		c.seq = max(c.seq, fine[i].seq) // a replayed batch it includes is skipped (see coarseSeq)
	}
	// A tier t partial for the same span exists only if a straggler (a
	// fine partial evicted after its span was downsampled) is merged now:
	// merge, never overwrite.
	err := e.opt.Store.Scan(uint8(t), id, coarse[0].bucket, coarse[len(coarse)-1].bucket+1, func(bk int64, data []byte) bool {
		i, found := searchParts(coarse, bk)
		if !found {
			return true
		}
		var p partial
		d := decoder{b: data}
		decodePartial(&d, e.sks, &p, true)
		if d.err == nil {
			e.merge(&coarse[i], &p, true)
			coarse[i].seq = max(coarse[i].seq, p.seq)
		}
		return true
	})
	if err != nil {
		e.stats.storeErrors++
		return false
	}
	puts := make([]StoredPartial, len(coarse))
	var enc encoder
	for i := range coarse {
		enc.b = nil // the store keeps the slice
		encodeStored(&enc, &coarse[i])
		puts[i] = StoredPartial{Bucket: coarse[i].bucket, Data: enc.b}
	}
	if err := e.opt.Store.Replace(id, uint8(t-1), lo, hi, uint8(t), puts); err != nil {
		e.stats.storeErrors++
		return false
	}
	first, last := fine[0].bucket, fine[len(fine)-1].bucket
	e.cache.invalidateRange(uint8(t-1), id, first, last+1, e.blockSpan(t-1))
	e.cache.invalidateRange(uint8(t), id, first, last+1, e.blockSpan(t))
	e.stats.downsampled += uint64(len(fine))
	return true
}

// sweepRetention deletes partials of every tier below the retention cut.
func (e *Engine) sweepRetention(budget *int) bool {
	sw := &e.maint.ret
	if !sw.active {
		target := e.retentionCut()
		if target <= sw.done {
			return true
		}
		*sw = sweep{done: sw.done, target: target, active: true}
	}
	for sw.series < len(e.series.list) {
		s := &e.series.list[sw.series]
		if s.stored && sw.done <= s.storedMax {
			for t := range e.tiers {
				n, err := e.opt.Store.DeleteRange(uint8(t), uint32(sw.series), sw.done, sw.target)
				if err != nil {
					e.stats.storeErrors++
					e.maint.failed = true
					return false
				}
				if n > 0 {
					e.cache.invalidateRange(uint8(t), uint32(sw.series), sw.done, sw.target, e.blockSpan(t))
				}
				e.stats.retentionDeleted += uint64(n)
				*budget -= n
			}
		}
		sw.series++
		if *budget--; *budget <= 0 {
			return false
		}
	}
	sw.done, sw.active = sw.target, false
	return true
}

// coarseSeq reports whether bucket bk of a series is covered by a
// downsampled partial, and the highest batch Seq that partial includes.
// Only events for old buckets that are not live nor stored at the base
// resolution get here.
func (e *Engine) coarseSeq(id uint32, bk int64) (uint64, bool) {
	for t := 1; t < len(e.tiers); t++ {
		data, ok, err := e.opt.Store.Get(uint8(t), id, alignDown(bk, e.tiers[t].k))
		if err != nil {
			e.stats.storeErrors++
			continue
		}
		if !ok {
			continue
		}
		var p partial
		d := decoder{b: data}
		decodePartial(&d, e.sks, &p, false)
		return p.seq, true
	}
	return 0, false
}
