package sinks

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"edgeflow/aggregate"
)

// windowsProducer writes the results of the windows that the log entries
// after the sink's position changed: windows their events fall in, and
// windows the engine's watermark made final since the last step. It asks
// the engine for their current results, as /v1/aggregates does, so the
// table holds what the API answers.
type windowsProducer struct {
	cfg     Config
	src     Source
	metrics map[string]bool
	windows []sinkWindow
	aggs    aggregate.Aggs
}

// sinkWindow is one configured window of the sink.
type sinkWindow struct {
	name string // as configured: the table's window column
	spec aggregate.WindowSpec
	// byName: a configured window of the engine, queried by name.
	byName bool
}

func newWindowsProducer(cfg Config, src Source) (*windowsProducer, error) {
	p := &windowsProducer{cfg: cfg, src: src, metrics: map[string]bool{}}
	for _, m := range cfg.Metrics {
		p.metrics[m] = true
	}
	eng := src.Engine()
	if eng == nil {
		return nil, fmt.Errorf("%w: sink %q: key \"kind\": postgres_windows needs the hub's aggregate engine (aggregate.enabled)", ErrInvalidConfig, cfg.Name)
	}
	for _, w := range cfg.Windows {
		sw := sinkWindow{name: w}
		if strings.Contains(w, ":") {
			spec, err := aggregate.ParseWindowSpec(w)
			if err != nil {
				return nil, fmt.Errorf("%w: sink %q: key \"windows\": %q: %v", ErrInvalidConfig, cfg.Name, w, err)
			}
			sw.spec = spec
		} else {
			i := slices.IndexFunc(eng.Options().Windows, func(c aggregate.WindowConfig) bool { return c.Name == w })
			if i < 0 {
				return nil, fmt.Errorf("%w: sink %q: key \"windows\": %q is neither kind:size nor a window configured in aggregate.windows", ErrInvalidConfig, cfg.Name, w)
			}
			spec, err := eng.Options().Windows[i].Spec()
			if err != nil {
				return nil, fmt.Errorf("%w: sink %q: key \"windows\": %q: %v", ErrInvalidConfig, cfg.Name, w, err)
			}
			sw.spec, sw.byName = spec, true
		}
		if sw.spec.Kind == aggregate.Session && cfg.Kind != KindPostgresWindows {
			return nil, fmt.Errorf("%w: sink %q: key \"windows\": %q: %s", ErrInvalidConfig, cfg.Name, w, errSessionWindows)
		}
		p.windows = append(p.windows, sw)
	}
	p.aggs = aggregate.AggCount | aggregate.AggSum | aggregate.AggMin | aggregate.AggMax | aggregate.AggAvg
	for _, q := range cfg.Quantiles {
		switch q {
		case "p50":
			p.aggs |= aggregate.AggP50
		case "p95":
			p.aggs |= aggregate.AggP95
		case "p99":
			p.aggs |= aggregate.AggP99
		}
	}
	// A query with every configured window proves the group-by and the
	// windows valid before the sink starts.
	for _, w := range p.windows {
		for m := range p.metrics {
			now := time.Now()
			if _, err := eng.Query(p.query(m, w, now, now.Add(time.Nanosecond))); err != nil {
				return nil, fmt.Errorf("%w: sink %q: the engine refuses its windows or group_by: %v", ErrInvalidConfig, cfg.Name, err)
			}
			break
		}
	}
	return p, nil
}

func (p *windowsProducer) query(metric string, w sinkWindow, from, to time.Time) aggregate.Query {
	q := aggregate.Query{Metric: metric, From: from, To: to, GroupBy: p.cfg.GroupBy, Aggs: p.aggs}
	if w.byName {
		q.WindowName = w.name
	} else {
		q.Window = w.spec
	}
	return q
}

func (p *windowsProducer) schema() tableSchema { return windowsSchema(p.cfg.Quantiles) }

// mergeSQL upserts the staged windows: a row is replaced only by a newer
// revision of it (final after provisional, then revision by revision), a
// provisional row by a newer provisional one, or a session by the same
// session grown (a later end: events joined it; its revision, counted
// against its end, may then be lower).
func (p *windowsProducer) mergeSQL(target, stage tableName) string {
	names := p.schema().names()
	cols := quoted(names)
	var set []string
	for _, n := range names {
		if !slices.Contains(p.schema().key, n) {
			set = append(set, fmt.Sprintf("%s = EXCLUDED.%s", quoted([]string{n}), quoted([]string{n})))
		}
	}
	t := target.sql()
	return fmt.Sprintf(`INSERT INTO %[1]s (%[2]s) SELECT %[2]s FROM %[3]s
		ON CONFLICT (metric, "window", group_key, start_time) DO UPDATE SET %[4]s
		WHERE (%[1]s.final, %[1]s.revision) < (EXCLUDED.final, EXCLUDED.revision) OR (NOT %[1]s.final AND NOT EXCLUDED.final)
			OR %[1]s.end_time < EXCLUDED.end_time`,
		t, cols, stage.sql(), strings.Join(set, ", "))
}

// interval is [from, to) of window starts, Unix ns.
type interval struct{ from, to int64 }

// next reads up to BatchEntries entries after st.pos, collects the event
// times of the sink's metrics, and queries the windows that hold them and
// those that turned final since st.wm.
func (p *windowsProducer) next(ctx context.Context, st state, applied uint64) (output, state, error) {
	var out output
	eng := p.src.Engine()
	// The watermark is read before the queries: everything final at it
	// is final in their answers.
	wm := eng.Stats().Watermark
	next := st
	times := map[string][]int64{}
	err := p.src.Read(st.pos, applied, p.cfg.BatchEntries, func(b *Batch) error {
		next.pos = b.Pos
		for i := range b.Events {
			e := &b.Events[i]
			if p.metrics[e.Metric] {
				times[e.Metric] = append(times[e.Metric], e.EventTimeNs)
			}
			if p.cfg.Events {
				out.events = append(out.events, eventRow(b, e))
			}
			out.eventTimeNs = max(out.eventTimeNs, e.EventTimeNs)
		}
		return ctx.Err()
	})
	if err != nil {
		return output{}, st, fmt.Errorf("read the hub's log after %d: %w", st.pos, err)
	}
	if wm.After(st.wm) {
		next.wm = wm
	}
	rows := map[rowKey][]any{}
	al := int64(eng.Options().AllowedLateness)
	span := int64(eng.Options().MaxSessionSpan)
	for _, w := range p.windows {
		size := int64(w.spec.Size)
		session := w.spec.Kind == aggregate.Session
		gap := int64(w.spec.Gap)
		for metric := range p.metrics {
			ivs := make([]interval, 0, len(times[metric])+1)
			for _, t := range times[metric] {
				if session {
					// The session holding t starts at most a span (and a
					// gap) before it; the sessions it merged with start
					// less than a gap after it.
					ivs = append(ivs, interval{t - span - gap, t + gap + 1})
					continue
				}
				ivs = append(ivs, interval{t - size + 1, t + 1}) // starts of the windows holding t
			}
			if !st.wm.IsZero() && next.wm.After(st.wm) {
				// Windows whose end + allowed lateness is in (st.wm, wm]; a
				// session ends a gap after its last event, at most a span
				// after its start.
				if session {
					ivs = append(ivs, interval{st.wm.UnixNano() - al - gap - span, next.wm.UnixNano() - al - gap + 1})
				} else {
					ivs = append(ivs, interval{st.wm.UnixNano() - al - size + 1, next.wm.UnixNano() - al - size + 1})
				}
			}
			for _, iv := range merge(ivs) {
				if err := p.collect(ctx, eng, metric, w, iv, next.pos, rows); err != nil {
					return output{}, st, err
				}
				if session {
					// Every session starting in iv is in rows now (or not
					// final); a row starting there under another start
					// was merged away.
					out.replaced = append(out.replaced, replacedRange{metric: metric, window: w.name,
						from: time.Unix(0, iv.from).UTC(), to: time.Unix(0, iv.to).UTC()})
				}
			}
		}
	}
	out.rows = make([][]any, 0, len(rows))
	for _, r := range rows {
		out.rows = append(out.rows, r)
	}
	return out, next, nil
}

// merge sorts and joins overlapping or touching intervals.
func merge(ivs []interval) []interval {
	slices.SortFunc(ivs, func(a, b interval) int { return cmp.Compare(a.from, b.from) })
	out := ivs[:0]
	for _, iv := range ivs {
		if n := len(out); n > 0 && iv.from <= out[n-1].to {
			out[n-1].to = max(out[n-1].to, iv.to)
			continue
		}
		out = append(out, iv)
	}
	return out
}

// rowKey identifies a row: the table's primary key.
type rowKey struct {
	metric, window, group string
	start                 int64
}

// collect queries the windows starting in iv and adds their rows; a query
// over the engine's result cap is split in halves.
func (p *windowsProducer) collect(ctx context.Context, eng *aggregate.Engine, metric string, w sinkWindow, iv interval, pos uint64, rows map[rowKey][]any) error {
	res, err := eng.QueryContext(ctx, p.query(metric, w, time.Unix(0, iv.from), time.Unix(0, iv.to)))
	if errors.Is(err, aggregate.ErrLimit) && iv.to-iv.from > 1 {
		mid := iv.from + (iv.to-iv.from)/2
		if err := p.collect(ctx, eng, metric, w, interval{iv.from, mid}, pos, rows); err != nil {
			return err
		}
		return p.collect(ctx, eng, metric, w, interval{mid, iv.to}, pos, rows)
	}
	if err != nil {
		return fmt.Errorf("query %s %s [%s, %s): %w", metric, w.name, time.Unix(0, iv.from).UTC().Format(time.RFC3339Nano),
			time.Unix(0, iv.to).UTC().Format(time.RFC3339Nano), err)
	}
	for i := range res {
		r := &res[i]
		if !r.Final && !p.cfg.Provisional {
			continue
		}
		group, err := json.Marshal(groupOf(r.Group))
		if err != nil {
			return err
		}
		k := rowKey{metric, w.name, string(group), r.Start.UnixNano()}
		rows[k] = p.row(metric, w.name, group, r, pos)
	}
	return nil
}

// groupOf is the group_key value: the group's dimensions (an empty object
// without group_by).
func groupOf(g map[string]string) map[string]string {
	if g == nil {
		return map[string]string{}
	}
	return g
}

// row is the table row of one window result, in windowsSchema's order.
func (p *windowsProducer) row(metric, window string, group []byte, r *aggregate.WindowResult, pos uint64) []any {
	row := []any{metric, window, string(group), r.Start.UTC(), r.End.UTC(), int64(r.Count), r.Sum, r.Min, r.Max, r.Avg}
	for _, q := range quantileNames {
		if !slices.Contains(p.cfg.Quantiles, q) {
			continue
		}
		switch q {
		case "p50":
			row = append(row, r.P50)
		case "p95":
			row = append(row, r.P95)
		case "p99":
			row = append(row, r.P99)
		}
	}
	return append(row, r.Final, int32(min(r.Revision, math.MaxInt32)), int64(min(r.Late, math.MaxInt64)), int64(pos))
}
