package rules

import (
	"slices"

	"edgeflow/aggregate"
)

// absenceState is one absence rule's groups.
type absenceState struct {
	rule   *Rule
	groups map[string]*runs
	// order is the groups' keys sorted, so a watermark fires silences in
	// the same order on every run (alert Seq is deterministic).
	order []string
}

func (a *absenceState) addGroup(g string, rs *runs) {
	a.groups[g] = rs
	i, _ := slices.BinarySearch(a.order, g)
	a.order = slices.Insert(a.order, i, g)
}

// run is a stretch of event time [first, last] whose consecutive events
// are at most the rule's After apart.
type run struct{ First, Last int64 }

// runs are a group's runs, sorted and disjoint; consecutive runs are more
// than After apart, so every gap between them is a silence. Memory grows
// with the silences, not the events.
type runs struct{ R []run }

// insert adds event time t, merging the runs within d of it, and returns
// the index range of runs it replaced [lo, hi) and the index of the run
// now holding t.
func (rs *runs) insert(t, d int64) (lo, hi, at int) {
	lo, hi = rs.span(t, d)
	if lo == hi {
		rs.R = slices.Insert(rs.R, lo, run{t, t})
		return lo, lo, lo
	}
	merged := run{min(rs.R[lo].First, t), max(rs.R[hi-1].Last, t)}
	rs.R = slices.Replace(rs.R, lo, hi, merged)
	return lo, hi, lo
}

// prune drops runs that ended before cut, keeping the last one.
func (rs *runs) prune(cut int64) {
	n := 0
	for n < len(rs.R)-1 && rs.R[n].Last < cut {
		n++
	}
	if n > 0 {
		rs.R = slices.Delete(rs.R, 0, n)
	}
}

// silence is a gap after a run: from its last event to the next run's
// first (end 0: open, nothing after it yet).
type silence struct{ start, end int64 }

// silences lists the silences after runs [i, j) that fire at watermark wm.
func (rs *runs) silences(i, j int, d, wm int64, out []silence) []silence {
	for k := max(i, 0); k < min(j, len(rs.R)); k++ {
		if k+1 < len(rs.R) {
			out = append(out, silence{rs.R[k].Last, rs.R[k+1].First})
		} else if wm-rs.R[k].Last > d {
			out = append(out, silence{rs.R[k].Last, 0})
		}
	}
	return out
}

func (e *Evaluator) absenceEvent(a *absenceState, device string, ev *aggregate.Event) {
	r := a.rule
	if r.Metric != "" && ev.Metric != r.Metric {
		return
	}
	g := groupKey(r.GroupBy, device, ev)
	rs := a.groups[g]
	if rs == nil {
		if len(a.groups) >= e.opt.MaxGroups {
			e.stats.GroupsRefused++
			return
		}
		rs = &runs{}
		a.addGroup(g, rs)
	}
	d := int64(r.After)
	// The silences around the touched runs before and after the insert:
	// the ones that vanished resolve (a backlog covered them), the rest
	// fire or get their new end.
	lo, hi := rs.span(ev.Time, d)
	before := rs.silences(lo-1, hi, d, e.wm, nil)
	_, _, at := rs.insert(ev.Time, d)
	after := rs.silences(at-1, at+1, d, e.wm, nil)
	for _, s := range before {
		if !slices.ContainsFunc(after, func(x silence) bool { return x.start == s.start }) {
			e.resolve(r.Name, g, s.start)
		}
	}
	for _, s := range after {
		e.fireSilence(r.Name, g, s)
	}
}

// span is the index range of runs an event at t would merge.
func (rs *runs) span(t, d int64) (lo, hi int) {
	lo, _ = slices.BinarySearchFunc(rs.R, t, func(r run, t int64) int {
		if r.Last+d < t {
			return -1
		}
		return 1
	})
	hi = lo
	for hi < len(rs.R) && rs.R[hi].First-d <= t {
		hi++
	}
	return lo, hi
}

func (e *Evaluator) fireSilence(rule, g string, s silence) {
	a := e.alerts[alertID(rule, g, s.start)]
	if s.end == 0 {
		if a != nil && a.State == Firing && a.End.IsZero() {
			return // still silent; the value stays what it was when it fired
		}
		e.set(rule, g, s.start, Firing, float64(e.wm-s.start)/1e9, 0)
		return
	}
	e.set(rule, g, s.start, Firing, float64(s.end-s.start)/1e9, s.end)
}

func (e *Evaluator) absenceWatermark(a *absenceState) {
	d := int64(a.rule.After)
	for _, g := range a.order {
		rs := a.groups[g]
		n := len(rs.R)
		if n == 0 || e.wm-rs.R[n-1].Last <= d {
			continue
		}
		if x := e.alerts[alertID(a.rule.Name, g, rs.R[n-1].Last)]; x != nil && x.State == Firing {
			continue
		}
		e.fireSilence(a.rule.Name, g, silence{rs.R[n-1].Last, 0})
	}
}
