package aggregate

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Partial sets: the mergeable state of one metric over a time range, as
// one hub holds it, so that a client can merge several hubs' states into
// one answer (see QueryPartials). A hub owns a partition of the devices,
// so each series lives on one hub; the merge adds counts, sums and sketch
// bins and picks the last value by event time and stream identity, which
// makes it exact.

const (
	partialSetMagic = "EFPS"
	// partialSetVersion is the encoding of a set without an attribute
	// filter; partialSetVersionFiltered adds the filter. A set without
	// one is written as version 1 so that hubs reading version 1 only
	// still merge it.
	partialSetVersion         = 1
	partialSetVersionFiltered = 2
)

// PartialSet is one hub's partials of one metric, grouped, at the base
// resolution, with what window evaluation needs: the hub watermark (for
// Final), its known streams' watermarks (for Behind) and the identity of
// the streams that hold a group's last value. Encode it with
// MarshalBinary; it is versioned.
type PartialSet struct {
	Metric string
	// GroupBy may hold attribute dimensions (attr.KEY): the exporting hub
	// joined each partial with its device's attribute version in force
	// then, and the labels carry the values.
	GroupBy []string
	// AttrFilter is the attribute filter (attr.KEY=VALUE) the exporting
	// hub applied; a set merges only into a query with the same filter.
	AttrFilter map[string]string
	// From and To are the bucket range exported, [From, To) in time.
	From, To time.Time
	// Resolution, SketchAccuracy, SketchMaxBins and AllowedLateness are
	// the hub's; sets merge only when they agree.
	Resolution      time.Duration
	SketchAccuracy  float64
	SketchMaxBins   int
	AllowedLateness time.Duration
	watermark       int64
	hasWatermark    bool
	streams         []setStream
	groups          []setGroup
}

// setStream is a stream a set refers to.
type setStream struct {
	device string
	id     StreamID
	wm     int64
	known  bool // counts for Behind (sent within the late horizon)
}

// setGroup is one group's partials, ascending by bucket; lastStream
// indexes the set's streams.
type setGroup struct {
	labels []string // values of GroupBy, in order
	parts  []partial
}

// Groups returns the number of groups and of partials in the set.
func (ps *PartialSet) Groups() (groups, partials int) {
	for _, g := range ps.groups {
		partials += len(g.parts)
	}
	return len(ps.groups), partials
}

// ExportPartials returns the partials of q.Metric with From <= bucket
// start < To (widened to whole buckets), merged per group of q.GroupBy.
// q.Window, Aggs and Limit are ignored. Attribute dimensions (attr.KEY)
// and q.AttrFilter join each partial with its device's attribute version
// in force at the partial's time, as Query does; they need the engine's
// attribute table (SetAttrSource). Bad parameters give a *ParamError;
// more than max_query_partials partials a *LimitError. A range that
// reaches downsampled data (see Options.Downsample) is a *ParamError for
// from: sets carry base-resolution partials only.
func (e *Engine) ExportPartials(q Query) (*PartialSet, error) {
	return e.ExportPartialsContext(context.Background(), q)
}

// ExportPartialsContext is ExportPartials that stops when ctx is done,
// with an error wrapping ctx.Err().
func (e *Engine) ExportPartialsContext(ctx context.Context, q Query) (*PartialSet, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if q.Metric == "" {
		return nil, paramErr("metric", "is required")
	}
	if q.From.IsZero() || q.To.IsZero() || !q.From.Before(q.To) {
		return nil, paramErr("from", "from and to are required and from must be before to")
	}
	if err := e.checkGroupBy(q.GroupBy); err != nil {
		return nil, err
	}
	p := &queryPlan{Query: q, sketches: true, limit: e.opt.MaxQueryResults}
	if err := e.checkAttrs(p); err != nil {
		return nil, err
	}
	p.from, p.to = q.From.UnixNano(), q.To.UnixNano()
	p.b0, p.b1 = floorDiv(p.from, e.res), -floorDiv(-p.to, e.res)
	if t := e.deepestTier(p.b0); t > 0 {
		// A set has one resolution, and a merging client could not tell
		// which windows downsampled partials answer exactly: refuse.
		return nil, paramErr("from", "partials before %s are downsampled to %v (older than %v); partial sets hold base-resolution (%v) partials only: use a from at or after %s, or query each hub with a window that is a multiple of %v",
			ts(e.tierCut(1)*e.res).Format(time.RFC3339), e.opt.Downsample[t-1].Resolution, e.opt.Downsample[t-1].After,
			e.opt.Resolution, ts(e.tierCut(1)*e.res).Format(time.RFC3339), e.opt.Downsample[t-1].Resolution)
	}
	ps := &PartialSet{Metric: q.Metric, GroupBy: slices.Clone(q.GroupBy), AttrFilter: maps.Clone(q.AttrFilter),
		From: ts(p.b0 * e.res), To: ts(p.b1 * e.res),
		Resolution: e.opt.Resolution, SketchAccuracy: e.opt.SketchAccuracy, SketchMaxBins: e.opt.SketchMaxBins,
		AllowedLateness: e.opt.AllowedLateness, watermark: e.clk.final, hasWatermark: e.clk.hasFinal}
	refs := map[uint32]uint32{} // engine stream -> set stream
	for i := range e.streams {
		if st := &e.streams[i]; e.known(st) && (q.Keep == nil || q.Keep(st.device)) {
			refs[uint32(i)] = uint32(len(ps.streams))
			ps.streams = append(ps.streams, setStream{device: st.device, id: st.id, wm: st.wm, known: true})
		}
	}
	m, ok := e.series.metricIdx[q.Metric]
	if !ok {
		return ps, nil
	}
	r := e.newRun(p)
	r.ctx = ctx
	if err := r.precheck(e.series.metrics[m].series); err != nil {
		return nil, err
	}
	collect := r.collect
	if p.joinsAttrs() {
		collect = r.collectAttrs
	}
	if err := collect(e.series.metrics[m].series); err != nil {
		return nil, err
	}
	slices.SortFunc(r.groups, func(a, b *group) int { return strings.Compare(a.key, b.key) })
	for _, g := range r.groups {
		sg := setGroup{parts: make([]partial, 0, len(g.accs))}
		for _, d := range q.GroupBy {
			sg.labels = append(sg.labels, g.labels[d])
		}
		for _, a := range g.accs {
			if a.count == 0 {
				continue
			}
			si, ok := refs[a.lastStream]
			if !ok {
				st := &e.streams[a.lastStream]
				si = uint32(len(ps.streams))
				refs[a.lastStream] = si
				ps.streams = append(ps.streams, setStream{device: st.device, id: st.id, wm: st.wm})
			}
			a.lastStream = si
			// A group's first series is aliased (mergeInto): the set must
			// not share the live partial's sketch or late marks, which the
			// engine clears and recycles after the read lock is released
			// (an eviction) while the set is merged or encoded.
			if a.sk != nil {
				a.sk = a.sk.Copy()
			}
			a.late = slices.Clone(a.late)
			sg.parts = append(sg.parts, a)
		}
		ps.groups = append(ps.groups, sg)
	}
	return ps, nil
}

// MarshalBinary encodes the set: magic, version, then the fields in a
// fixed order; partials as the engine stores them (sketch included).
func (ps *PartialSet) MarshalBinary() ([]byte, error) {
	enc := &encoder{}
	enc.b = append(enc.b, partialSetMagic...)
	if len(ps.AttrFilter) > 0 {
		enc.uvarint(partialSetVersionFiltered)
	} else {
		enc.uvarint(partialSetVersion)
	}
	enc.str(ps.Metric)
	enc.uvarint(uint64(len(ps.GroupBy)))
	for _, g := range ps.GroupBy {
		enc.str(g)
	}
	if len(ps.AttrFilter) > 0 {
		keys := slices.Sorted(maps.Keys(ps.AttrFilter))
		enc.uvarint(uint64(len(keys)))
		for _, k := range keys {
			enc.str(k)
			enc.str(ps.AttrFilter[k])
		}
	}
	enc.varint(ps.From.UnixNano())
	enc.varint(ps.To.UnixNano())
	enc.varint(int64(ps.Resolution))
	enc.f64(ps.SketchAccuracy)
	enc.uvarint(uint64(ps.SketchMaxBins))
	enc.varint(int64(ps.AllowedLateness))
	enc.varint(ps.watermark)
	enc.bool(ps.hasWatermark)
	enc.uvarint(uint64(len(ps.streams)))
	for _, st := range ps.streams {
		enc.str(st.device)
		enc.b = append(enc.b, st.id[:]...)
		enc.varint(st.wm)
		enc.bool(st.known)
	}
	enc.uvarint(uint64(len(ps.groups)))
	for _, g := range ps.groups {
		for _, l := range g.labels {
			enc.str(l)
		}
		enc.uvarint(uint64(len(g.parts)))
		for i := range g.parts {
			encodePartial(enc, &g.parts[i])
		}
	}
	return enc.b, nil
}

// DecodePartialSet reads what MarshalBinary wrote. Sizes and counts are
// bounded by the input's length before anything is allocated; a bad input
// gives an error wrapping ErrCorruptSnapshot that says what is wrong.
func DecodePartialSet(b []byte) (*PartialSet, error) {
	if len(b) < len(partialSetMagic) || string(b[:len(partialSetMagic)]) != partialSetMagic {
		return nil, fmt.Errorf("%w: partial set: bad magic", ErrCorruptSnapshot)
	}
	d := &decoder{b: b[len(partialSetMagic):]}
	v := d.uvarint()
	if d.err == nil && v != partialSetVersion && v != partialSetVersionFiltered {
		return nil, fmt.Errorf("%w: partial set version %d, this build reads %d and %d", ErrIncompatibleSnapshot, v, partialSetVersion, partialSetVersionFiltered)
	}
	ps := &PartialSet{Metric: d.str()}
	for n := d.count(1); n > 0; n-- {
		ps.GroupBy = append(ps.GroupBy, d.str())
	}
	if v == partialSetVersionFiltered {
		n := d.count(2)
		if d.err == nil && n == 0 {
			d.fail("empty attribute filter")
		}
		prev := ""
		for i := 0; i < n && d.err == nil; i++ {
			k, val := d.str(), d.str()
			if d.err == nil && (k == "" || i > 0 && k <= prev) {
				d.fail("attribute filter keys (empty, repeated or out of order)")
				break
			}
			if ps.AttrFilter == nil {
				ps.AttrFilter = make(map[string]string, n)
			}
			ps.AttrFilter[k], prev = val, k
		}
	}
	ps.From, ps.To = ts(d.varint()), ts(d.varint())
	ps.Resolution, ps.SketchAccuracy = time.Duration(d.varint()), d.f64()
	maxBins := d.uvarint()
	ps.AllowedLateness = time.Duration(d.varint())
	ps.watermark, ps.hasWatermark = d.varint(), d.bool()
	if d.err == nil && (ps.Resolution <= 0 || !(ps.SketchAccuracy > 0 && ps.SketchAccuracy < 1) || maxBins == 0 || maxBins > 1<<20) {
		return nil, fmt.Errorf("%w: partial set: bad resolution, sketch accuracy or bins", ErrCorruptSnapshot)
	}
	ps.SketchMaxBins = int(maxBins)
	sks, err := newSketches(max(ps.SketchAccuracy, 1e-9), max(ps.SketchMaxBins, 1))
	if err != nil {
		return nil, fmt.Errorf("%w: partial set: %v", ErrCorruptSnapshot, err)
	}
	ps.streams = make([]setStream, d.count(20))
	for i := range ps.streams {
		st := &ps.streams[i]
		st.device = d.str()
		if len(d.b) < len(st.id) {
			d.fail("stream id")
			break
		}
		copy(st.id[:], d.b)
		d.b = d.b[len(st.id):]
		st.wm, st.known = d.varint(), d.bool()
	}
	ps.groups = make([]setGroup, d.count(1+len(ps.GroupBy)))
	for i := range ps.groups {
		g := &ps.groups[i]
		for range ps.GroupBy {
			g.labels = append(g.labels, d.str())
		}
		g.parts = make([]partial, d.count(20))
		for j := range g.parts {
			decodePartial(d, sks, &g.parts[j], true)
			if d.err == nil && int(g.parts[j].lastStream) >= len(ps.streams) {
				d.fail("last stream reference")
			}
		}
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("trailing bytes")
	}
	if d.err != nil {
		return nil, fmt.Errorf("partial set: %w", d.err)
	}
	return ps, nil
}

// QueryPartials answers q from the partial sets of several hubs as if one
// hub held all their events: counts, sums and sketch bins add up, min,
// max and last (by event time, then device, stream and sequence) compare
// across hubs, a window is Final once every hub's watermark has passed it,
// Behind counts the known streams of every hub, and revisions count the
// distinct (hub, Apply) pairs that brought late events. q.GroupBy must be
// a subset of the sets' group_by, which may hold attribute dimensions
// (attr.KEY: the exporting hubs joined them); the sets must share metric,
// resolution, sketch accuracy and allowed lateness, and their attribute
// filter must be q.AttrFilter (a *ParamError for attr otherwise: a set
// filtered otherwise, or not at all, cannot answer the query).
func QueryPartials(sets []*PartialSet, q Query) ([]WindowResult, error) {
	if len(sets) == 0 {
		return nil, paramErr("hubs", "no partial sets to merge")
	}
	first := sets[0]
	for i, ps := range sets {
		if ps.Metric != first.Metric || ps.Resolution != first.Resolution || ps.SketchAccuracy != first.SketchAccuracy ||
			ps.AllowedLateness != first.AllowedLateness || !slices.Equal(ps.GroupBy, first.GroupBy) {
			return nil, fmt.Errorf("%w: partial set %d (metric %q, resolution %v, sketch accuracy %v, allowed lateness %v, group_by %v) does not match set 0 (%q, %v, %v, %v, %v)",
				ErrInvalidQuery, i, ps.Metric, ps.Resolution, ps.SketchAccuracy, ps.AllowedLateness, ps.GroupBy,
				first.Metric, first.Resolution, first.SketchAccuracy, first.AllowedLateness, first.GroupBy)
		}
	}
	if q.Metric != first.Metric {
		return nil, paramErr("metric", "the partial sets hold metric %q, not %q", first.Metric, q.Metric)
	}
	for i, ps := range sets {
		if !maps.Equal(ps.AttrFilter, q.AttrFilter) {
			return nil, paramErr("attr", "partial set %d was exported with attribute filter %s, the query has %s: a set merges only into a query with its own filter",
				i, formatFilter(ps.AttrFilter), formatFilter(q.AttrFilter))
		}
	}
	for _, d := range q.GroupBy {
		if !slices.Contains(first.GroupBy, d) {
			return nil, paramErr("group_by", "%q is not among the partial sets' group_by (%s)", d, strings.Join(first.GroupBy, ", "))
		}
	}
	e, err := New(Options{Resolution: first.Resolution, SketchAccuracy: first.SketchAccuracy, SketchMaxBins: first.SketchMaxBins,
		AllowedLateness: first.AllowedLateness, DisableMergedStream: true, StreamBuffer: 1, LateLogSize: 1})
	if err != nil {
		return nil, err
	}
	e.attrsJoined = true
	q.AttrFilter = nil // the owners applied it
	e.loadSets(sets)
	return e.Query(q)
}

// formatFilter writes an attribute filter as its query parameters.
func formatFilter(f map[string]string) string {
	if len(f) == 0 {
		return "none"
	}
	var b strings.Builder
	for i, k := range slices.Sorted(maps.Keys(f)) {
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString(AttrPrefix + k + "=" + f[k])
	}
	return b.String()
}

// loadSets fills a fresh engine with the sets: one series per set and
// group (told apart by a hidden tag), a stream table that is the union of
// the sets', and the minimum watermark.
func (e *Engine) loadSets(sets []*PartialSet) {
	proc := int64(math.MinInt64)
	for _, ps := range sets {
		for _, st := range ps.streams {
			proc = max(proc, st.wm)
		}
	}
	e.clk.proc, e.clk.calced = proc, true
	e.clk.final, e.clk.hasFinal = math.MaxInt64, true
	for i, ps := range sets {
		if !ps.hasWatermark {
			e.clk.hasFinal = false
		}
		e.clk.final = min(e.clk.final, ps.watermark)
		local := make([]uint32, len(ps.streams))
		for j, st := range ps.streams {
			si := e.streamFor(st.device, st.id)
			local[j] = si
			if s := &e.streams[si]; st.known {
				s.has, s.wm, s.lastArrival = true, max(s.wm, st.wm), proc
			}
		}
		for _, g := range ps.groups {
			var device string
			tags := []Tag{{Key: "\x00hub", Value: strconv.Itoa(i)}}
			for k, dim := range ps.GroupBy {
				switch dim {
				case "device":
					device = g.labels[k]
				case "metric":
				default:
					tags = append(tags, Tag{Key: dim, Value: g.labels[k]})
				}
			}
			slices.SortFunc(tags, func(a, b Tag) int { return strings.Compare(a.Key, b.Key) })
			id := e.series.add(0, device, ps.Metric, tags)
			parts := slices.Clone(g.parts)
			for k := range parts {
				p := &parts[k]
				p.lastStream = local[p.lastStream]
				p.late = slices.Clone(p.late)
				for m := range p.late {
					p.late[m].apply = p.late[m].apply*uint64(len(sets)) + uint64(i) // distinct per hub
				}
			}
			e.series.list[id].parts = parts
		}
	}
	if !e.clk.hasFinal {
		e.clk.final = math.MinInt64
	}
}
