package aggregate

import (
	"context"
	"fmt"
	"hash/maphash"
	"math"
)

// A query's cost is checked twice against its caps, never by guessing:
//
//   - before any work (precheck): from the live partials of the metric's
//     series alone, which are in memory and cheap to scan, a floor of the
//     windows the query returns and of the partials it reads. A floor over
//     a cap is certain to hit it, so the query is refused there with a
//     *LimitError (Estimated set) having allocated nothing per series or
//     window. A query that fits is never refused: stored partials, other
//     series of a group and downsampled tiers only add windows and reads.
//   - while it runs (collect): the same floor over every partial read, so a
//     query whose stored partials take it over max_query_results stops
//     before it builds its groups' windows.
//
// The floor counts, per group, the windows of the series with the most,
// and sums over groups: the windows of aligned kinds (tumbling, hopping,
// sliding) grow with the buckets a group holds, so a group has at least
// as many as any one of its series. Session windows can merge as data is
// added, so they have no floor of windows (their partials still have one).

// ctxCheckEvery is how many series, groups or windows a query handles
// between looks at its context.
const ctxCheckEvery = 1024

// QueryContext is Query that stops when ctx is done: the client went
// away or a deadline passed. It then returns an error wrapping ctx.Err().
func (e *Engine) QueryContext(ctx context.Context, q Query) ([]WindowResult, error) {
	e.mu.RLock() // plan reads the configured windows, whose cursors Apply moves
	defer e.mu.RUnlock()
	p, err := e.plan(q)
	if err != nil {
		return nil, err
	}
	m, ok := e.series.metricIdx[q.Metric]
	if !ok {
		return nil, nil
	}
	r := e.newRun(p)
	r.ctx = ctx
	ids := e.series.metrics[m].series
	if err := r.precheck(ids); err != nil {
		return nil, err
	}
	collect := r.collect
	if p.joinsAttrs() {
		collect = r.collectAttrs
	}
	if err := collect(ids); err != nil {
		return nil, err
	}
	return r.windows()
}

// stopped returns the run's context error, looked at on the first call
// and then every ctxCheckEvery calls.
func (r *queryRun) stopped() error {
	if r.ctx == nil {
		return nil
	}
	if r.ticks++; r.ticks%ctxCheckEvery != 1 {
		return nil
	}
	if err := r.ctx.Err(); err != nil {
		return fmt.Errorf("aggregate: query of %s stopped: %w", r.p.Metric, err)
	}
	return nil
}

// hasFloor reports whether the plan's windows have a floor: aligned kinds.
func (p *queryPlan) hasFloor() bool {
	return !p.sketches && p.spec.Kind != Session && p.spec.Slide > 0
}

// liveInRange returns the series' live partials in the plan's bucket range.
func (r *queryRun) liveInRange(s *series) []partial {
	lo, _ := searchParts(s.parts, r.p.b0)
	hi, _ := searchParts(s.parts, r.p.b1)
	return s.parts[lo:hi]
}

// mayHaveData reports whether a series can hold a partial in the plan's
// bucket range: a live one, or a stored one (seriesParts reads the store
// only then).
func (r *queryRun) mayHaveData(s *series) bool {
	return len(r.liveInRange(s)) > 0 || (s.stored && s.storedMax >= r.p.b0)
}

// precheck refuses a query whose floor of windows or partials read,
// counted over live partials only, is over its cap. It allocates one map
// entry per group with live data, and stops at the cap.
func (r *queryRun) precheck(ids []uint32) error {
	seed := maphash.MakeSeed()
	var h maphash.Hash
	best := map[uint64]int64{} // group hash -> most windows of one of its series
	var windows int64
	reads := 0
	for _, id := range ids {
		if err := r.stopped(); err != nil {
			return err
		}
		s := &r.e.series.list[id]
		if !r.p.wants(s.device) {
			continue
		}
		live := r.liveInRange(s)
		if len(live) == 0 {
			continue
		}
		if reads += len(live); reads > r.e.opt.MaxQueryPartials {
			return &LimitError{Limit: "max_query_partials", Max: r.e.opt.MaxQueryPartials, Need: reads, Estimated: true}
		}
		if !r.p.hasFloor() {
			continue
		}
		n := r.alignedWindows(live)
		if n == 0 {
			continue
		}
		// Two groups whose keys collide count as one: the floor only drops.
		h.SetSeed(seed)
		for _, d := range r.p.GroupBy {
			h.WriteString(dimValue(s, d))
			h.WriteByte(0)
		}
		k := h.Sum64()
		if old := best[k]; n > old {
			best[k] = n
			if windows += n - old; windows > int64(r.p.limit) {
				return &LimitError{Limit: "max_query_results", Max: r.p.limit, Need: needOf(windows), Estimated: true}
			}
		}
	}
	return nil
}

// noteWindows raises group g's floor to n windows (of one of its series)
// and fails once the query's floor is over the result cap: collect's
// in-flight check.
func (r *queryRun) noteWindows(g *group, n int64) error {
	if n <= g.floor {
		return nil
	}
	r.floor += n - g.floor
	g.floor = n
	if r.floor > int64(r.p.limit) {
		return &LimitError{Limit: "max_query_results", Max: r.p.limit, Need: needOf(r.floor)}
	}
	return nil
}

// needOf converts a count for LimitError.Need, saturating on 32-bit
// platforms.
func needOf(n int64) int { return int(min(n, math.MaxInt32)) }

// alignedWindows counts the aligned windows (starts in [from, to), a
// multiple of slide) that hold at least one of parts, sorted by bucket:
// what aligned returns for a group of these partials alone.
func (r *queryRun) alignedWindows(parts []partial) int64 {
	size, slide, res := int64(r.p.spec.Size), int64(r.p.spec.Slide), r.e.res
	firstStart := -floorDiv(-r.p.from, slide) * slide
	lastStart := -floorDiv(-r.p.to, slide)*slide - slide
	next := firstStart
	var n int64
	for i := range parts {
		t := parts[i].bucket * res
		lo := max(-floorDiv(-(t-size+1), slide)*slide, next)
		hi := min(floorDiv(t, slide)*slide, lastStart)
		if hi >= lo {
			n += (hi-lo)/slide + 1 // one bucket's windows: at most size/slide
			next = hi + slide
		}
	}
	return n
}
