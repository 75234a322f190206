package rules

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"edgeflow/aggregate"
)

// thresholdState is one threshold rule's progress.
type thresholdState struct {
	rule *Rule
	// next is the end of the next window to evaluate as final (Unix ns;
	// 0 until the first watermark).
	next int64
	// crossing holds, for rules with For > 1, the value of each window that
	// crosses, per group (window start -> value).
	crossing map[string]map[int64]float64
}

func newThreshold(r *Rule) *thresholdState {
	return &thresholdState{rule: r, crossing: map[string]map[int64]float64{}}
}

// WindowUpdate is one window result of a threshold rule's query.
type WindowUpdate struct {
	Rule   string
	Result aggregate.WindowResult
}

// RuleQuery is a window query threshold rules need answered: rules on the
// same metric, window and grouping share one query asking for the union
// of their aggregates.
type RuleQuery struct {
	Rules []string
	Query aggregate.Query
}

// maxWindowsPerQuery bounds the windows one rule query spans, so its
// answer stays under the engine's max_query_results for fleets of a few
// thousand groups.
const maxWindowsPerQuery = 16

// maxCatchUpWindows bounds the windows one watermark move evaluates per
// rule; beyond it the rule skips ahead (counted nowhere: those windows
// are older than anything a live fleet alerts on).
const maxCatchUpWindows = 1024

// WindowQueries turns the engine's updates into the window queries the
// threshold rules need: windows that became final (or, for on:
// provisional, every window up to the watermark) and windows late data
// revised. It also applies the watermark updates (see Watermark).
func (e *Evaluator) WindowQueries(ups []aggregate.Update) []RuleQuery {
	e.mu.Lock()
	defer e.unlockAndPublish()
	var out []RuleQuery
	for _, u := range ups {
		switch u.Kind {
		case aggregate.UpdateWatermark:
			e.watermark(u.Watermark.UnixNano())
			for _, t := range e.thresholds {
				out = e.finalQueries(t, out)
			}
		case aggregate.UpdateRevised:
			for _, t := range e.thresholds {
				if t.rule.Metric == u.Metric {
					size := int64(t.rule.Window.Size)
					out = t.queries(u.Start.UnixNano()-size+1, u.End.UnixNano(), out)
				}
			}
		}
	}
	return dedupQueries(out)
}

func (e *Evaluator) finalQueries(t *thresholdState, out []RuleQuery) []RuleQuery {
	size, slide := int64(t.rule.Window.Size), int64(t.rule.Window.Slide)
	if e.minEvent == 0 {
		return out
	}
	if t.next == 0 {
		t.next = floorDiv(e.minEvent-size, slide)*slide + slide + size
	}
	lastStart := floorDiv(e.wm-int64(e.opt.AllowedLateness)-size, slide) * slide
	from := t.next - size
	if lastStart >= from {
		if lastStart-from > maxCatchUpWindows*slide {
			from = lastStart - maxCatchUpWindows*slide
		}
		out = t.queries(from, lastStart+1, out)
		t.next = lastStart + slide + size
	}
	if t.rule.Provisional && e.wm >= t.next-size {
		out = t.queries(t.next-size, e.wm+1, out)
	}
	return out
}

// queries asks for the windows with from <= start < to, in pieces.
func (t *thresholdState) queries(from, to int64, out []RuleQuery) []RuleQuery {
	step := maxWindowsPerQuery * int64(t.rule.Window.Slide)
	for f := from; f < to; f += step {
		out = append(out, RuleQuery{Rules: []string{t.rule.Name}, Query: aggregate.Query{
			Metric:  t.rule.Metric,
			Window:  t.rule.Window,
			From:    time.Unix(0, f).UTC(),
			To:      time.Unix(0, min(f+step, to)).UTC(),
			GroupBy: t.rule.GroupBy,
			Aggs:    aggOf(t.rule.Agg),
		}})
	}
	return out
}

// dedupQueries merges the queries of rules that ask the engine the same
// question (metric, window, grouping, span), keeping the first order.
func dedupQueries(qs []RuleQuery) []RuleQuery {
	type key struct {
		metric, window, groupBy string
		from, to                int64
	}
	idx := map[key]int{}
	out := qs[:0]
	for _, q := range qs {
		k := key{q.Query.Metric, q.Query.Window.String(), strings.Join(q.Query.GroupBy, "\x00"), q.Query.From.UnixNano(), q.Query.To.UnixNano()}
		i, ok := idx[k]
		if !ok {
			idx[k] = len(out)
			out = append(out, q)
			continue
		}
		o := &out[i]
		o.Query.Aggs |= q.Query.Aggs
		for _, r := range q.Rules {
			if !slices.Contains(o.Rules, r) {
				o.Rules = append(o.Rules, r)
			}
		}
	}
	return out
}

func aggOf(name string) aggregate.Aggs {
	a, _ := aggregate.ParseAggs([]string{name})
	return a | aggregate.AggCount
}

// Source answers window queries; *aggregate.Engine is one.
type Source interface {
	Query(aggregate.Query) ([]aggregate.WindowResult, error)
}

// Feed runs WindowQueries for the engine's updates against src and gives
// the results to ObserveWindows: the hub calls it with each batch of
// updates its engine subscription delivers.
func (e *Evaluator) Feed(src Source, ups []aggregate.Update) error {
	var errs []error
	for _, q := range e.WindowQueries(ups) {
		res, err := src.Query(q.Query)
		if err != nil {
			e.mu.Lock()
			e.stats.QueryErrors++
			e.mu.Unlock()
			errs = append(errs, fmt.Errorf("rules %q: %w", q.Rules, err))
			continue
		}
		e.mu.Lock()
		for _, name := range q.Rules {
			e.observeResults(name, res)
		}
		e.unlockAndPublish()
	}
	return errors.Join(errs...)
}

// ObserveWindows evaluates threshold rules on window results: a window
// that crosses fires (or updates its value), one that no longer does
// resolves. Rules on final windows ignore provisional results.
func (e *Evaluator) ObserveWindows(ws []WindowUpdate) {
	e.mu.Lock()
	defer e.unlockAndPublish()
	for i := range ws {
		e.observeResults(ws[i].Rule, []aggregate.WindowResult{ws[i].Result})
	}
}

func (e *Evaluator) observeResults(rule string, res []aggregate.WindowResult) {
	t := e.threshold(rule)
	if t == nil {
		return
	}
	for i := range res {
		if res[i].Final || t.rule.Provisional {
			e.observeWindow(t, &res[i])
		}
	}
}

func (e *Evaluator) threshold(name string) *thresholdState {
	for _, t := range e.thresholds {
		if t.rule.Name == name {
			return t
		}
	}
	return nil
}

func (e *Evaluator) observeWindow(t *thresholdState, res *aggregate.WindowResult) {
	r := t.rule
	v := aggValue(r.Agg, res)
	cross := res.Count > 0 && r.Op.Compare(v, r.Value)
	start, end := res.Start.UnixNano(), res.End.UnixNano()
	if r.For <= 1 {
		if !cross {
			// Most windows of a healthy fleet: only an existing alert
			// matters, found by an id built in scratch space, so the
			// common case allocates nothing.
			e.idBuf = appendResultID(e.idBuf[:0], r, res, start)
			if e.alerts[string(e.idBuf)] == nil {
				return
			}
		}
		e.thresholdAlert(r, resultGroup(r.GroupBy, res.Group), start, end, cross, v)
		return
	}
	g := resultGroup(r.GroupBy, res.Group)
	m := t.crossing[g]
	if m == nil {
		if !cross {
			return
		}
		if len(t.crossing) >= e.opt.MaxGroups {
			e.stats.GroupsRefused++
			return
		}
		m = map[int64]float64{}
		t.crossing[g] = m
	}
	if cross {
		m[start] = v
	} else {
		delete(m, start)
	}
	// The alerts of the windows whose run of For windows includes this one.
	slide, size := int64(r.Window.Slide), int64(r.Window.Size)
	for k := range r.For {
		s := start + int64(k)*slide
		all := true
		for j := range r.For {
			if _, ok := m[s-int64(j)*slide]; !ok {
				all = false
				break
			}
		}
		val := m[s]
		if k == 0 {
			val = v
		}
		e.thresholdAlert(r, g, s, s+size, all, val)
	}
	_ = end
}

func (e *Evaluator) thresholdAlert(r *Rule, g string, start, end int64, cross bool, v float64) {
	if cross {
		e.set(r.Name, g, start, Firing, v, end)
		return
	}
	if a := e.alerts[alertID(r.Name, g, start)]; a != nil {
		e.set(r.Name, g, start, Resolved, v, end)
	}
}

// appendResultID appends the id of r's alert for window result res
// starting at start (alertID of its group) to b.
func appendResultID(b []byte, r *Rule, res *aggregate.WindowResult, start int64) []byte {
	b = append(b, r.Name...)
	b = append(b, '/')
	for i, d := range r.GroupBy {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, d...)
		b = append(b, '=')
		b = append(b, res.Group[d]...)
	}
	b = append(b, '/')
	return strconv.AppendInt(b, start, 10)
}

func aggValue(agg string, r *aggregate.WindowResult) float64 {
	switch agg {
	case "count":
		return float64(r.Count)
	case "sum":
		return r.Sum
	case "min":
		return r.Min
	case "max":
		return r.Max
	case "avg":
		return r.Avg
	case "last":
		return r.Last
	case "p50":
		return r.P50
	case "p95":
		return r.P95
	case "p99":
		return r.P99
	}
	return 0
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}
