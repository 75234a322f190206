package aggregate

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/DataDog/sketches-go/ddsketch"
)

// Query asks for windowed aggregates of one metric.
type Query struct {
	// Metric is the metric name (required).
	Metric string
	// Window is the window; ignored when WindowName is set.
	Window WindowSpec
	// WindowName selects a window by name instead of Window: a configured
	// window's name, or else a bare duration ("10s", "1m"), which is a
	// tumbling window of that size (see Engine.resolveWindow).
	WindowName string
	// From and To bound window starts: windows with From <= Start < To.
	// Sessions: sessions starting in [From, To), scanned up to
	// max_session_span past To.
	From, To time.Time
	// GroupBy lists the dimensions to group by: "device", "metric", a
	// tag key (one of Options.TagKeys when set) or "attr.KEY", a device
	// attribute as of each event's event time (see SetAttrSource).
	// Empty: one group.
	GroupBy []string
	// Device, if set, restricts the query to that device's series: a
	// dashboard (or a load test's probe) following one device does not
	// pay for the whole fleet.
	Device string
	// Keep, if set, restricts the query to the series of the devices it
	// returns true for (and a partial set to their streams): a hub of a
	// cluster answers only for the partitions it owns now, though its
	// engine may still hold the state of one it lost.
	Keep func(device string) bool
	// AttrFilter keeps only the events whose device's attribute version
	// in force at their event time holds every key=value in it (the
	// query parameter attr.KEY=VALUE; see SetAttrSource).
	AttrFilter map[string]string
	// Aggs selects aggregates; zero means all. Quantiles cost the most.
	Aggs Aggs
	// Limit caps the windows returned; 0 means max_query_results, more is
	// an error.
	Limit int
}

// WindowResult is one window of one group. Aggregates not asked for are
// zero.
type WindowResult struct {
	Start, End time.Time
	// Group holds the group's value for each GroupBy dimension (shared
	// between the windows of one group; do not modify).
	Group map[string]string
	Count uint64
	Sum   float64
	Min   float64
	Max   float64
	Avg   float64
	// Last is the value of the latest event (by event time, then device,
	// stream and sequence); LastTime its event time.
	Last     float64
	LastTime time.Time
	// P50, P95 and P99 are within the sketch's relative accuracy
	// (Options.SketchAccuracy) of a true value at that rank.
	P50, P95, P99 float64
	// Final is true once the hub watermark passed End + allowed_lateness.
	Final bool
	// Revision counts the Applies that changed the window after it was
	// final; Late counts the events they brought.
	Revision uint64
	Late     uint64
	// Behind counts known streams (of the group's device, when grouped by
	// device) whose watermark has not reached End.
	Behind int
}

// queryPlan is a validated query.
// wants reports whether the query covers device's series (Device, Keep).
func (p *queryPlan) wants(device string) bool {
	return (p.Device == "" || device == p.Device) && (p.Keep == nil || p.Keep(device))
}

type queryPlan struct {
	Query
	spec     WindowSpec
	from, to int64
	b0, b1   int64 // bucket range to read, [b0, b1)
	limit    int
	need     need // quantile state read from the store (set by collect)
	sketches bool // decode every sketch (partials exported for merging)
	// attrsJoined: attribute dimensions are tags of the series (an engine
	// merging partial sets, whose owners joined them).
	attrsJoined bool
}

// Query computes the windows of q. Invalid parameters give a *ParamError
// naming the parameter; a query over a cap gives a *LimitError, before
// any work when its cost makes that certain (see QueryContext). An
// unknown metric gives no windows and no error.
func (e *Engine) Query(q Query) ([]WindowResult, error) {
	return e.QueryContext(context.Background(), q)
}

// plan validates q against the options.
func (e *Engine) plan(q Query) (*queryPlan, error) {
	p := &queryPlan{Query: q, spec: q.Window, attrsJoined: e.attrsJoined}
	if q.Metric == "" {
		return nil, paramErr("metric", "is required")
	}
	if q.WindowName != "" {
		spec, err := e.resolveWindow(q.WindowName)
		if err != nil {
			return nil, err
		}
		p.spec = spec
	}
	if err := p.spec.validate(e.opt.Resolution); err != nil {
		return nil, err
	}
	p.spec = p.spec.normalize(e.opt.Resolution)
	if q.From.IsZero() || q.To.IsZero() || !q.From.Before(q.To) {
		return nil, paramErr("from", "from and to are required and from must be before to")
	}
	if err := e.checkGroupBy(q.GroupBy); err != nil {
		return nil, err
	}
	if err := e.checkAttrs(p); err != nil {
		return nil, err
	}
	p.limit = e.opt.MaxQueryResults
	if q.Limit < 0 || q.Limit > p.limit {
		return nil, paramErr("limit", "must be between 1 and max_query_results=%d", p.limit)
	} else if q.Limit > 0 {
		p.limit = q.Limit
	}
	if p.Aggs == 0 {
		p.Aggs = AllAggs
	}
	p.from, p.to = q.From.UnixNano(), q.To.UnixNano()
	p.b0, p.b1 = e.bucketRange(p)
	if err := e.checkDownsampled(p); err != nil {
		return nil, err
	}
	return p, nil
}

// bucketRange is the buckets a plan reads.
func (e *Engine) bucketRange(p *queryPlan) (int64, int64) {
	if p.spec.Kind == Session {
		gap := int64(p.spec.Gap)
		return floorDiv(p.from-gap, e.res), floorDiv(satAdd(p.to, int64(e.opt.MaxSessionSpan)), e.res) + 1
	}
	slide, size := int64(p.spec.Slide), int64(p.spec.Size)
	first := -floorDiv(-p.from, slide) * slide    // first start >= from
	last := -floorDiv(-p.to, slide)*slide - slide // last start < to
	return floorDiv(first, e.res), floorDiv(last+size, e.res)
}

func (e *Engine) checkGroupBy(dims []string) error {
	for i, d := range dims {
		if d == "" {
			return paramErr("group_by", "empty dimension")
		}
		if slices.Contains(dims[:i], d) {
			return paramErr("group_by", "dimension %q repeated", d)
		}
		if k, ok := attrDim(d); ok {
			if k == "" {
				return paramErr("group_by", "dimension %q names no attribute key", d)
			}
			continue
		}
		if d != "device" && d != "metric" && len(e.series.tagKeys) > 0 && !slices.Contains(e.series.tagKeys, d) {
			return paramErr("group_by", "%q is not device, metric or a configured tag key (%s)", d, strings.Join(e.series.tagKeys, ", "))
		}
	}
	return nil
}

// group is one group of a query and its per-bucket accumulators.
type group struct {
	key     string
	labels  map[string]string
	device  string // when grouped by device: its streams decide Behind
	accs    []partial
	aliased bool  // accs are a series' live partials: read only
	series  int   // series in the group
	floor   int64 // most aligned windows of one of its series read so far
	// pending are series' partials not yet in accs (see fold); pendingN
	// counts them.
	pending  [][]partial
	pendingN int
}

// queryRun is one query's working state.
type queryRun struct {
	e      *Engine
	p      *queryPlan
	groups []*group
	byKey  map[string]*group
	read   int
	behind behindIndex
	ctx    context.Context // nil: never stopped
	ticks  int             // calls of stopped
	floor  int64           // windows the query returns at least (cost.go)
	refs   []partRef       // fold's buffer
	// agg and sk are result's scratch: the merge of a window's partials
	// and its sketch, used only until the window's figures are filled in.
	agg partial
	sk  *ddsketch.DDSketch
}

func (e *Engine) newRun(p *queryPlan) *queryRun {
	return &queryRun{e: e, p: p, byKey: map[string]*group{}}
}

// collect rolls the series' partials in range up into their groups.
func (r *queryRun) collect(ids []uint32) error {
	var kb strings.Builder
	groups := make([]*group, len(ids))
	for i, id := range ids {
		if err := r.stopped(); err != nil {
			return err
		}
		s := &r.e.series.list[id]
		if !r.p.wants(s.device) || !r.mayHaveData(s) {
			continue // a series with no partial in range adds nothing to its group
		}
		groups[i] = r.groupOf(s, &kb)
		groups[i].series++
	}
	r.p.need = r.planNeed()
	for i, id := range ids {
		g := groups[i]
		if g == nil {
			continue
		}
		if err := r.stopped(); err != nil {
			return err
		}
		s := &r.e.series.list[id]
		parts, err := r.seriesParts(id, s)
		if err != nil {
			return err
		}
		r.read += len(parts)
		if r.read > r.e.opt.MaxQueryPartials {
			return &LimitError{Limit: "max_query_partials", Max: r.e.opt.MaxQueryPartials, Need: r.read}
		}
		if r.p.hasFloor() {
			if err := r.noteWindows(g, r.alignedWindows(parts)); err != nil {
				return err
			}
		}
		r.mergeInto(g, parts)
	}
	for _, g := range r.groups {
		if len(g.pending) > 0 {
			r.fold(g)
		}
	}
	return nil
}

// planNeed decides how much quantile state stored partials must decode:
// none without quantiles; their stored quantiles when every window is one
// partial of one series (aligned windows one bucket wide, one series per
// group); the sketches otherwise, to merge them.
func (r *queryRun) planNeed() need {
	if r.p.sketches {
		return needSketch
	}
	if !r.p.Aggs.quantiles() {
		return needNone
	}
	if r.p.spec.Kind == Session || int64(r.p.spec.Size) != r.e.res {
		return needSketch
	}
	for _, g := range r.groups {
		if g.series > 1 {
			return needSketch
		}
	}
	return needQuantiles
}

func (r *queryRun) groupOf(s *series, kb *strings.Builder) *group {
	kb.Reset()
	for _, d := range r.p.GroupBy {
		kb.WriteString(dimValue(s, d))
		kb.WriteByte(0)
	}
	if g, ok := r.byKey[kb.String()]; ok {
		return g
	}
	g := &group{key: kb.String(), labels: make(map[string]string, len(r.p.GroupBy))}
	for _, d := range r.p.GroupBy {
		g.labels[d] = dimValue(s, d)
		if d == "device" {
			g.device = s.device
		}
	}
	r.byKey[g.key] = g
	r.groups = append(r.groups, g)
	return g
}

func dimValue(s *series, dim string) string {
	switch dim {
	case "device":
		return s.device
	case "metric":
		return s.name
	}
	return tagValue(s.tags, dim)
}

// seriesParts returns the series' partials in the plan's bucket range:
// stored ones merged with live ones (live wins: it is newer). Downsampled
// tiers are read only where the hub watermark says they may hold data.
func (r *queryRun) seriesParts(id uint32, s *series) ([]partial, error) {
	lo, _ := searchParts(s.parts, r.p.b0)
	hi, _ := searchParts(s.parts, r.p.b1)
	live := s.parts[lo:hi]
	if !s.stored || s.storedMax < r.p.b0 {
		return live, nil
	}
	e := r.e
	stored, err := e.storedParts(0, id, r.p.b0, min(r.p.b1, s.storedMax+1), r.p.need)
	if err != nil {
		return nil, err
	}
	for t := 1; t < len(e.tiers); t++ {
		from, to := alignDown(r.p.b0, e.tiers[t].k), min(r.p.b1, s.storedMax+1, e.tierCut(t))
		if from >= to {
			break // deeper tiers' cuts are older still
		}
		coarse, err := e.storedParts(uint8(t), id, from, to, r.p.need)
		if err != nil {
			return nil, err
		}
		stored = mergeTiers(coarse, stored)
	}
	return mergeSorted(stored, live), nil
}

// blockSpan is the base buckets one cache block of tier t covers.
func (e *Engine) blockSpan(t int) int64 { return cacheBlockBuckets * e.tiers[t].k }

// storedParts returns the decoded stored partials of a tier of a series
// with from <= bucket < to, decoded as n asks: cached blocks from the
// cache, each run of missing blocks with one store scan (then cached).
func (e *Engine) storedParts(tier uint8, id uint32, from, to int64, n need) ([]partial, error) {
	var out []partial
	add := func(parts []partial) {
		if out == nil {
			out = make([]partial, 0, min(to-from, 1<<16))
		}
		out = appendBuckets(out, parts, from, to)
	}
	span := e.blockSpan(int(tier))
	last := floorDiv(to-1, span)
	for blk := floorDiv(from, span); blk <= last; {
		if parts, ok := e.cache.get(blockKey{tier, id, blk}, n); ok {
			add(parts)
			blk++
			continue
		}
		end := blk + 1
		for end <= last && !e.cache.contains(blockKey{tier, id, end}, n) {
			end++
		}
		e.cache.missed(int(end - blk - 1))
		parts, err := e.readBlocks(tier, id, blk, end, n)
		if err != nil {
			return nil, err
		}
		if out == nil && end > last { // one read covers the range: no copy
			i, _ := searchParts(parts, from)
			j, _ := searchParts(parts, to)
			return parts[i:j:j], nil
		}
		add(parts)
		blk = end
	}
	return out, nil
}

// appendBuckets appends the partials of sorted parts with from <= bucket < to.
func appendBuckets(out, parts []partial, from, to int64) []partial {
	i, _ := searchParts(parts, from)
	j, _ := searchParts(parts, to)
	return append(out, parts[i:j]...)
}

// readBlocks reads and decodes the stored partials of blocks [b0, b1) of a
// series in one scan and caches them block by block. Corrupt entries are
// counted as store errors and left out (and nothing is cached: the store
// may be repaired).
func (e *Engine) readBlocks(tier uint8, id uint32, b0, b1 int64, n need) ([]partial, error) {
	span := e.blockSpan(int(tier))
	parts := make([]partial, 0, min((b1-b0)*cacheBlockBuckets, 1<<14))
	var qs [][3]float64 // stored quantiles, allocated in slabs
	bad := 0
	err := e.opt.Store.Scan(tier, id, b0*span, b1*span, func(bk int64, data []byte) bool {
		if n == needQuantiles && len(qs) == 0 {
			qs = make([][3]float64, cacheBlockBuckets)
		}
		var p partial
		d := decoder{b: data}
		var q *[3]float64
		if len(qs) > 0 {
			q = &qs[0]
		}
		decodeStored(&d, e.sks, &p, n, q)
		if p.q != nil {
			qs = qs[1:]
		}
		if d.err != nil {
			bad++
			return true
		}
		parts = append(parts, p)
		return true
	})
	if err != nil {
		return nil, err
	}
	if bad > 0 {
		e.queryStoreErrors.Add(uint64(bad))
		return parts, nil
	}
	for blk := b0; blk < b1; blk++ {
		i, _ := searchParts(parts, blk*span)
		j, _ := searchParts(parts, (blk+1)*span)
		e.cache.add(blockKey{tier, id, blk}, parts[i:j:j], n)
	}
	return parts, nil
}

// mergeSorted merges two bucket-sorted lists; b wins on equal buckets.
func mergeSorted(a, b []partial) []partial {
	if len(a) == 0 {
		return b
	}
	if len(b) == 0 {
		return a
	}
	out := make([]partial, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || (i < len(a) && a[i].bucket < b[j].bucket):
			out = append(out, a[i])
			i++
		case i == len(a) || b[j].bucket < a[i].bucket:
			out = append(out, b[j])
			j++
		default:
			out = append(out, b[j])
			i, j = i+1, j+1
		}
	}
	return out
}

// mergeTiers merges a downsampled tier's partials into finer ones, both
// bucket-sorted. Their spans are disjoint (Replace is atomic), so equal
// buckets keep both rather than one hiding the other.
func mergeTiers(coarse, fine []partial) []partial {
	if len(coarse) == 0 {
		return fine
	}
	if len(fine) == 0 {
		return coarse
	}
	out := make([]partial, 0, len(coarse)+len(fine))
	i, j := 0, 0
	for i < len(coarse) || j < len(fine) {
		if j == len(fine) || (i < len(coarse) && coarse[i].bucket <= fine[j].bucket) {
			out = append(out, coarse[i])
			i++
		} else {
			out = append(out, fine[j])
			j++
		}
	}
	return out
}

// mergeInto adds one series' sorted partials to a group. A group's first
// series is aliased, not copied: its partials are read-only here and
// copies of them are marked shared. Later series wait in pending and are
// folded in by runs (fold), so a group of many series costs a sort of
// their partials rather than a copy of its accumulators per series.
func (r *queryRun) mergeInto(g *group, parts []partial) {
	if len(parts) == 0 {
		return
	}
	if len(g.accs) == 0 && len(g.pending) == 0 {
		g.accs, g.aliased = parts, true
		return
	}
	g.pending = append(g.pending, parts)
	if g.pendingN += len(parts); g.pendingN >= max(len(g.accs), foldRun) {
		r.fold(g)
	}
}

// foldRun is the fewest pending partials a group folds at once (more when
// its accumulators are longer, so each fold's copy of them is paid for).
const foldRun = 4096

// partRef locates one partial of a fold: list -1 is the group's
// accumulators, else an index into pending.
type partRef struct {
	bucket    int64
	list, pos int
}

// fold merges a group's pending series into its accumulators, as merging
// them one after the other (mergeSeq) would, in one pass: every bucket's
// partials in series order, starting from the accumulator's. Lists that
// hold a bucket twice (tiers half way through a downsampling pass) take
// mergeSeq.
func (r *queryRun) fold(g *group) {
	lists := g.pending
	g.pending, g.pendingN = nil, 0
	strict := strictlySorted(g.accs)
	for _, l := range lists {
		strict = strict && strictlySorted(l)
	}
	if !strict {
		for _, l := range lists {
			r.mergeSeq(g, l)
		}
		return
	}
	refs := r.refs[:0]
	for i := range g.accs {
		refs = append(refs, partRef{g.accs[i].bucket, -1, i})
	}
	for li, l := range lists {
		for j := range l {
			refs = append(refs, partRef{l[j].bucket, li, j})
		}
	}
	slices.SortStableFunc(refs, func(a, b partRef) int { return cmp.Compare(a.bucket, b.bucket) })
	n := 0
	for k := range refs {
		if k == 0 || refs[k].bucket != refs[k-1].bucket {
			n++
		}
	}
	out := make([]partial, 0, n)
	for k := 0; k < len(refs); {
		var a partial
		b := refs[k].bucket
		if refs[k].list < 0 {
			a = shared(&g.accs[refs[k].pos])
			k++
		} else {
			a.reset(b)
		}
		for ; k < len(refs) && refs[k].bucket == b; k++ {
			r.e.merge(&a, &lists[refs[k].list][refs[k].pos], r.p.need == needSketch)
		}
		out = append(out, a)
	}
	r.refs = refs[:0]
	g.accs, g.aliased = out, false
}

// strictlySorted reports whether parts' buckets strictly ascend.
func strictlySorted(parts []partial) bool {
	for i := 1; i < len(parts); i++ {
		if parts[i].bucket <= parts[i-1].bucket {
			return false
		}
	}
	return true
}

// mergeSeq merges one series' sorted partials into a group's sorted
// accumulators.
func (r *queryRun) mergeSeq(g *group, parts []partial) {
	if len(g.accs) == 0 {
		g.accs, g.aliased = parts, true
		return
	}
	out := make([]partial, 0, len(g.accs)+len(parts))
	i, j := 0, 0
	for i < len(g.accs) || j < len(parts) {
		var a partial
		switch {
		case j == len(parts) || (i < len(g.accs) && g.accs[i].bucket < parts[j].bucket):
			out = append(out, shared(&g.accs[i]))
			i++
			continue
		case i == len(g.accs) || parts[j].bucket < g.accs[i].bucket:
			a.reset(parts[j].bucket)
		default:
			a = shared(&g.accs[i])
			i++
		}
		r.e.merge(&a, &parts[j], r.p.need == needSketch)
		out = append(out, a)
		j++
	}
	g.accs, g.aliased = out, false
}

// shared copies a partial for a query: its sketch and late marks belong
// to someone else (copy on write).
func shared(p *partial) partial {
	c := *p
	c.shared = true
	c.late = c.late[:len(c.late):len(c.late)]
	return c
}

// windows evaluates every group's windows and sorts them by start, then
// group.
func (r *queryRun) windows() ([]WindowResult, error) {
	r.behind = r.e.newBehindIndex(r.p.GroupBy, r.groups, r.p.Keep)
	out := make([]WindowResult, 0, r.estimate())
	slices.SortFunc(r.groups, func(a, b *group) int { return strings.Compare(a.key, b.key) })
	for _, g := range r.groups {
		if err := r.stopped(); err != nil {
			return nil, err
		}
		var err error
		if r.p.spec.Kind == Session {
			out, err = r.sessions(g, out)
		} else {
			out, err = r.aligned(g, out)
		}
		if err != nil {
			return nil, err
		}
	}
	slices.SortStableFunc(out, func(a, b WindowResult) int { return a.Start.Compare(b.Start) })
	return out, nil
}

// estimate bounds the number of windows, for one allocation of results.
func (r *queryRun) estimate() int {
	n := 0
	for _, g := range r.groups {
		n += len(g.accs)
	}
	if k := r.p.spec.Kind; k != Session {
		n *= int(max(r.p.spec.Size/r.p.spec.Slide, 1))
	}
	return min(n, r.p.limit)
}

// aligned evaluates tumbling, hopping and sliding windows: every window
// start s (a multiple of slide in [from, to)) whose [s, s+size) holds data.
func (r *queryRun) aligned(g *group, out []WindowResult) ([]WindowResult, error) {
	size, slide, res := int64(r.p.spec.Size), int64(r.p.spec.Slide), r.e.res
	next := int64(-1 << 62)
	lo, hi := 0, 0
	for _, a := range g.accs {
		t := a.bucket * res
		first := max(-floorDiv(-(t-size+1), slide)*slide, next, -floorDiv(-r.p.from, slide)*slide)
		for s := first; s <= t && s < r.p.to; s += slide {
			for lo < len(g.accs) && g.accs[lo].bucket*res < s {
				lo++
			}
			for hi < len(g.accs) && g.accs[hi].bucket*res < s+size {
				hi++
			}
			if len(out) >= r.p.limit {
				return nil, &LimitError{Limit: "max_query_results", Max: r.p.limit, Need: len(out) + 1}
			}
			out = append(out, WindowResult{})
			r.result(&out[len(out)-1], g, g.accs[lo:hi], s, s+size)
			next = s + slide
		}
	}
	return out, nil
}

// sessions evaluates session windows: runs of partials whose events are
// less than gap apart. Because gap >= resolution (and >= the resolution
// of any downsampled tier in range), no gap can hide inside a partial, so
// sessions are exact on event times. A group that mixes tiers (a
// downsampling pass half way through its series) can hold partials out of
// event-time order; they are then ordered by first event first.
func (r *queryRun) sessions(g *group, out []WindowResult) ([]WindowResult, error) {
	gap := int64(r.p.spec.Gap)
	accs := g.accs
	byFirst := func(a, b partial) int { return cmp.Compare(a.firstT, b.firstT) }
	if !slices.IsSortedFunc(accs, byFirst) {
		accs = slices.Clone(accs) // may alias a series' live partials
		slices.SortStableFunc(accs, byFirst)
	}
	for i := 0; i < len(accs); {
		last := accs[i].lastT
		j := i + 1
		for j < len(accs) && accs[j].firstT-last < gap {
			last = max(last, accs[j].lastT)
			j++
		}
		start, end := accs[i].firstT, last+gap
		if start >= r.p.from && start < r.p.to {
			if len(out) >= r.p.limit {
				return nil, &LimitError{Limit: "max_query_results", Max: r.p.limit, Need: len(out) + 1}
			}
			out = append(out, WindowResult{})
			r.result(&out[len(out)-1], g, accs[i:j], start, end)
		}
		i = j
	}
	return out, nil
}

// result folds the accumulators of one window into w (in place: a
// WindowResult is large and a query makes many).
func (r *queryRun) result(w *WindowResult, g *group, accs []partial, start, end int64) {
	e := r.e
	agg := &accs[0]
	if len(accs) > 1 {
		agg = &r.agg
		agg.reset(accs[0].bucket)
		for i := range accs {
			e.merge(agg, &accs[i], false)
		}
		if r.p.need == needSketch {
			if sk := r.mergeSketches(accs); sk != nil {
				agg.sk, agg.q = sk, nil
			}
		}
	}
	w.Start, w.End, w.Group, w.Behind = ts(start), ts(end), g.labels, r.behind.count(g.device, end)
	w.Final = e.clk.hasFinal && end+int64(e.opt.AllowedLateness) <= e.clk.final
	w.Late, w.Revision = lateness(agg.late, end+int64(e.opt.AllowedLateness))
	r.fill(w, agg)
}

// mergeSketches merges the sketches of accs' non-empty partials into the
// run's scratch sketch (nil when none has one). Merging into one reused
// sketch rather than a copy of the first gives the same bins (collapsing
// does not depend on order) without allocating a sketch per window.
func (r *queryRun) mergeSketches(accs []partial) *ddsketch.DDSketch {
	var sk *ddsketch.DDSketch
	for i := range accs {
		if accs[i].count == 0 || accs[i].sk == nil {
			continue
		}
		if sk == nil {
			if r.sk == nil {
				r.sk = r.e.sks.scratch()
			} else {
				r.sk.Clear()
			}
			sk = r.sk
		}
		_ = sk.MergeWith(accs[i].sk) // same mapping, cannot fail
	}
	return sk
}

// fill sets the asked-for aggregates.
func (r *queryRun) fill(w *WindowResult, agg *partial) {
	a := r.p.Aggs
	w.Count = agg.count
	if a.Has(AggSum) || a.Has(AggAvg) {
		w.Sum = agg.total()
		w.Avg = w.Sum / float64(agg.count)
	}
	if a.Has(AggMin) || a.Has(AggMax) {
		w.Min, w.Max = agg.min, agg.max
	}
	if a.Has(AggLast) {
		w.Last, w.LastTime = agg.lastV, ts(agg.lastT)
	}
	if a.quantiles() {
		switch {
		case agg.sk != nil:
			w.P50, w.P95, w.P99 = quantiles(agg.sk, agg.min, agg.max)
		case agg.q != nil:
			w.P50, w.P95, w.P99 = agg.q[0], agg.q[1], agg.q[2]
		}
	}
}

// lateness counts the late events of marks that came once the window was
// final (watermark >= threshold) and the distinct Applies that brought
// them.
func lateness(marks []lateMark, threshold int64) (late, revision uint64) {
	var applies []uint64
	for _, m := range marks {
		if m.wm >= threshold {
			late += uint64(m.n)
			applies = append(applies, m.apply)
		}
	}
	if len(applies) > 1 {
		slices.Sort(applies)
		applies = slices.Compact(applies)
	}
	return late, uint64(len(applies))
}

// behindIndex answers "how many known streams have a watermark below t",
// for all streams or one device's.
type behindIndex struct {
	all      []int64
	byDevice map[string][]int64
}

// newBehindIndex indexes the known streams' watermarks. Grouped by
// device, it indexes only the devices of groups (a query for one device of
// a large fleet touches that device's streams, not the fleet's).
// keep, if set, leaves out the streams of the devices it refuses
// (Query.Keep).
func (e *Engine) newBehindIndex(groupBy []string, groups []*group, keep func(string) bool) behindIndex {
	var b behindIndex
	if slices.Contains(groupBy, "device") {
		b.byDevice = make(map[string][]int64, len(groups))
		for _, g := range groups {
			b.byDevice[g.device] = nil
		}
	}
	for i := range e.streams {
		st := &e.streams[i]
		if !e.known(st) || keep != nil && !keep(st.device) {
			continue
		}
		if b.byDevice == nil {
			b.all = append(b.all, st.wm)
		} else if wms, ok := b.byDevice[st.device]; ok {
			b.byDevice[st.device] = append(wms, st.wm)
		}
	}
	slices.Sort(b.all)
	for _, v := range b.byDevice {
		slices.Sort(v)
	}
	return b
}

func (b *behindIndex) count(device string, t int64) int {
	wms := b.all
	if b.byDevice != nil {
		wms = b.byDevice[device]
	}
	n, _ := slices.BinarySearchFunc(wms, t, cmp.Compare[int64])
	return n
}
