package aggregate

import (
	"cmp"
	"math"
	"slices"
	"strings"
)

// AttrPrefix starts a query dimension or filter that names a device
// attribute ("attr.site"): the attribute version in force at each event's
// event time decides its group (the stream-table join, done at query time).
const AttrPrefix = "attr."

// AttrVersion is one version of a device's attributes: in force from From
// (Unix ns) until the next version's From. Versions replace each other
// whole: a key missing from a version is absent while it is in force.
type AttrVersion struct {
	From  int64
	Attrs map[string]string
	// Written is the hub's server time (Unix ns) of the log entry that
	// wrote the version.
	Written int64
}

// AttrSource is the device attribute table the engine joins queries
// with. AttrVersions returns a device's versions sorted by From; the
// engine only reads the slice, and the source must never modify one it
// has returned (copy on write), as queries read it without a lock.
type AttrSource interface {
	AttrVersions(device string) []AttrVersion
}

// SetAttrSource sets the attribute table that group_by=attr.KEY and
// attribute filters join with; nil refuses them.
func (e *Engine) SetAttrSource(src AttrSource) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.attrs = src
}

// AttrAt returns the version of vs in force at t (sorted by From), or
// nil before the first.
func AttrAt(vs []AttrVersion, t int64) map[string]string {
	i, found := slices.BinarySearchFunc(vs, t, func(v AttrVersion, t int64) int { return cmp.Compare(v.From, t) })
	if found {
		return vs[i].Attrs
	}
	if i == 0 {
		return nil
	}
	return vs[i-1].Attrs
}

// attrDim returns the attribute key of an "attr.KEY" dimension.
func attrDim(d string) (string, bool) { return strings.CutPrefix(d, AttrPrefix) }

// joinsAttrs reports whether a plan needs the attribute join. A plan of
// an engine merging partial sets reads attribute dimensions as tags: the
// sets' owners joined them already (see QueryPartials).
func (p *queryPlan) joinsAttrs() bool {
	if len(p.AttrFilter) > 0 {
		return true
	}
	if p.attrsJoined {
		return false
	}
	for _, d := range p.GroupBy {
		if _, ok := attrDim(d); ok {
			return true
		}
	}
	return false
}

// checkAttrs refuses attribute dimensions and filters without a table.
// Exported partials join like a query: a base bucket's partial has one
// version (see partTime), so the owner's join is exact and its sets merge
// as any others.
func (e *Engine) checkAttrs(p *queryPlan) error {
	if !p.joinsAttrs() {
		return nil
	}
	if e.attrs == nil {
		if len(p.AttrFilter) > 0 {
			return paramErr("attr", "attribute filters need the hub's device attribute table, which this engine does not have")
		}
		return paramErr("group_by", "attribute dimensions need the hub's device attribute table, which this engine does not have")
	}
	for k := range p.AttrFilter {
		if k == "" {
			return paramErr("attr", "empty attribute key in a filter")
		}
	}
	return nil
}

// partTime is the event time that decides a partial's attribute version:
// its first event's (all of a base bucket's events share a version, since
// versions start on bucket boundaries; a downsampled partial counts under
// the version of its first event).
func (e *Engine) partTime(p *partial) int64 {
	if p.count > 0 && p.firstT != math.MaxInt64 {
		return p.firstT
	}
	return p.bucket * e.res
}

// collectAttrs is collect for plans that join attributes: each series'
// partials are split into runs that share a version, and each run goes
// to the group (or is filtered out) by that version's attributes. Queries
// and exported partial sets (ExportPartialsContext) both collect so.
func (r *queryRun) collectAttrs(ids []uint32) error {
	r.p.need = needNone
	if r.p.sketches || r.p.Aggs.quantiles() {
		r.p.need = needSketch // groups are known only once read; sets carry sketches
	}
	var kb strings.Builder
	for _, id := range ids {
		if err := r.stopped(); err != nil {
			return err
		}
		s := &r.e.series.list[id]
		if !r.p.wants(s.device) || !r.mayHaveData(s) {
			continue
		}
		parts, err := r.seriesParts(id, s)
		if err != nil {
			return err
		}
		vs := r.e.attrs.AttrVersions(s.device)
		for i, vi := 0, -1; i < len(parts); {
			vi = versionAt(vs, r.e.partTime(&parts[i]), vi)
			j := i + 1
			for j < len(parts) && versionAt(vs, r.e.partTime(&parts[j]), vi) == vi {
				j++
			}
			run := parts[i:j:j]
			i = j
			var attrs map[string]string
			if vi >= 0 {
				attrs = vs[vi].Attrs
			}
			if !attrsMatch(attrs, r.p.AttrFilter) {
				continue
			}
			r.read += len(run)
			if r.read > r.e.opt.MaxQueryPartials {
				return &LimitError{Limit: "max_query_partials", Max: r.e.opt.MaxQueryPartials, Need: r.read}
			}
			g := r.groupOfAttrs(s, attrs, &kb)
			g.series++
			r.mergeInto(g, run)
		}
	}
	for _, g := range r.groups {
		if len(g.pending) > 0 {
			r.fold(g)
		}
	}
	return nil
}

// versionAt returns the index in vs (sorted by From) of the version in
// force at t, -1 before the first, as AttrAt finds it. hint is the index
// found for the previous partial: a series' partials come in time order,
// so the answer is usually hint or a little after it, found without a
// search. Consecutive versions with equal contents get distinct indexes
// and so only cost a second run into the same group.
func versionAt(vs []AttrVersion, t int64, hint int) int {
	if hint < -1 || hint >= len(vs) || hint >= 0 && vs[hint].From > t {
		i, found := slices.BinarySearchFunc(vs, t, func(v AttrVersion, t int64) int { return cmp.Compare(v.From, t) })
		if found {
			return i
		}
		return i - 1
	}
	for steps := 0; hint+1 < len(vs) && vs[hint+1].From <= t; steps++ {
		if steps == 8 { // far behind: search the rest
			return hint + 1 + versionAt(vs[hint+1:], t, len(vs))
		}
		hint++
	}
	return hint
}

// attrsMatch reports whether attrs hold every key=value of filter.
func attrsMatch(attrs, filter map[string]string) bool {
	for k, v := range filter {
		if got, ok := attrs[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// groupOfAttrs is groupOf with attribute dimensions read from attrs.
func (r *queryRun) groupOfAttrs(s *series, attrs map[string]string, kb *strings.Builder) *group {
	kb.Reset()
	for _, d := range r.p.GroupBy {
		kb.WriteString(dimValueAttrs(s, d, attrs))
		kb.WriteByte(0)
	}
	if g, ok := r.byKey[kb.String()]; ok {
		return g
	}
	g := &group{key: kb.String(), labels: make(map[string]string, len(r.p.GroupBy))}
	for _, d := range r.p.GroupBy {
		g.labels[d] = dimValueAttrs(s, d, attrs)
		if d == "device" {
			g.device = s.device
		}
	}
	r.byKey[g.key] = g
	r.groups = append(r.groups, g)
	return g
}

func dimValueAttrs(s *series, d string, attrs map[string]string) string {
	if k, ok := attrDim(d); ok {
		return attrs[k]
	}
	return dimValue(s, d)
}

// maxRevisedPartials bounds the partials one attribute version marks as
// revised; beyond it the rest keep their revision (ReviseDevice returns
// how many it skipped).
const maxRevisedPartials = 1 << 16

// ReviseDevice announces version v of device's attributes (an
// UpdateAttributes) and records that the version in force changed over
// event times [from, to) (empty when v changed nothing; v was written at
// log position walSeq):
// every final window of the device's series with data in that range is
// revised, as a late event revises it (its revision counts one more
// Apply, with no late events), and announced on the update stream. The
// query join reads the table itself, so results change without this;
// this makes the change visible as a revision. Partials that a replay
// reloads from the store with walSeq already applied are skipped. It
// returns how many partials it marked and how many it left unmarked over
// its bound.
func (e *Engine) ReviseDevice(device string, v AttrVersion, from, to int64, walSeq uint64) (marked, skipped int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.applies++
	e.notice = notice{device: device}
	e.notes.out = append(e.notes.out, Update{Kind: UpdateAttributes, Device: device, Attrs: v.Attrs, Start: ts(v.From)})
	defer e.flushNotes()
	lim := e.limits()
	if !e.clk.hasFinal || from >= to {
		return 0, 0
	}
	b0 := floorDiv(from, e.res)
	b1 := floorDiv(to-1, e.res) + 1
	if to == math.MaxInt64 {
		b1 = math.MaxInt64
	}
	b1 = min(b1, lim.late) // provisional windows change without a revision
	for id := range e.series.list {
		s := &e.series.list[id]
		if s.device != device {
			continue
		}
		for _, bk := range e.bucketsWithData(uint32(id), s, b0, b1) {
			if marked >= maxRevisedPartials {
				skipped++
				continue
			}
			p := e.partialFor(uint32(id), bk)
			if p == nil || (walSeq != 0 && walSeq <= p.guard) {
				continue
			}
			p.late = append(p.late, lateMark{wm: lim.wm, apply: e.applies})
			if len(p.late) > maxLateMarks {
				p.late = p.late[1:]
			}
			p.seq = max(p.seq, walSeq)
			e.notes.revised(s.metric, bk)
			marked++
		}
	}
	return marked, skipped
}

// bucketsWithData lists the buckets in [b0, b1) where series id holds a
// partial, live or stored at the base resolution.
func (e *Engine) bucketsWithData(id uint32, s *series, b0, b1 int64) []int64 {
	var out []int64
	if s.stored && s.storedMax >= b0 {
		_ = e.opt.Store.Scan(0, id, b0, min(b1, s.storedMax+1), func(bk int64, _ []byte) bool {
			out = append(out, bk)
			return len(out) <= maxRevisedPartials
		})
	}
	lo, _ := searchParts(s.parts, b0)
	for i := lo; i < len(s.parts) && s.parts[i].bucket < b1; i++ {
		if s.parts[i].count > 0 {
			out = append(out, s.parts[i].bucket)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
