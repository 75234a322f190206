package hub

import (
	"cmp"
	"context"
	"edgeflow/aggregate"
	"errors"
	"math"
	"slices"
	"strings"
	"time"

	"edgeflow/hub/api"
	"edgeflow/hub/eventtime"
	"edgeflow/hub/hubapi"
	"edgeflow/hub/hublog"
	"edgeflow/hub/registry"
)

// Bounds of GET /v1/events. The endpoint reads the log itself (the engine
// keeps aggregates, not events): the device's batch entries that the
// event-time index (package eventtime) names for [from, to), whatever their
// arrival, keeping the events whose corrected time is in range. Cost: one
// log entry read and parsed per batch of the device with events in the
// range's index buckets (a minute, an hour or a day wide, see
// eventtime). arrived_within, when given, keeps only the entries that
// arrived before to + arrived_within. The scan is capped at maxEventsScan
// entries and maxEventsMatch matching events; past a cap the answer is a
// 400 that says to narrow from/to.
const (
	maxEventsScan  = 200_000
	maxEventsMatch = 1_000_000
)

// storedEvents reads the device's events in [from, to) from the log and
// returns them in event-time order (then stream, then sequence).
// It stops with ctx's error when ctx is done.
func (s *Server) storedEvents(ctx context.Context, q api.EventsQuery) (*hubapi.EventsResponse, error) {
	out := &hubapi.EventsResponse{Device: q.Device, From: hubapi.RFC3339(q.From), To: hubapi.RFC3339(q.To), Events: []hubapi.EventJSON{}}
	// Read before the log: a backfill that ends during the read may have
	// missed this answer, never the other way round.
	running, incompleteNs := s.backfillState()
	out.Backfilling = running
	if incompleteNs != 0 {
		out.IncompleteBefore = hubapi.RFC3339(time.Unix(0, incompleteNs))
	}
	arrivedBefore := int64(math.MaxInt64)
	if q.Arrival > 0 {
		arrivedBefore = q.To.Add(q.Arrival).UnixNano()
	}
	app := newApplier(nil, nil, nil, s.opts.Limits)
	fromNs, toNs := q.From.UnixNano(), q.To.UnixNano()
	var matched []hubapi.EventJSON
	fn := func(e *hublog.Entry) error {
		if out.Scanned++; out.Scanned%1024 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		if e.Kind != hublog.KindBatch || e.Device != q.Device {
			return nil
		}
		v, err := app.parseStored(e)
		if err != nil {
			return err
		}
		for _, ev := range app.build(e, v).Events {
			if ev.EventTimeNs < fromNs || ev.EventTimeNs >= toNs || (q.Metric != "" && ev.Metric != q.Metric) {
				continue
			}
			if len(matched) == maxEventsMatch {
				return hubapi.BadParam("to", "more than %d events match: narrow from/to or add metric", maxEventsMatch)
			}
			ej := eventJSON(e, &ev)
			ej.Attributes = aggregate.AttrAt(s.attrs.AttrVersions(e.Device), ev.EventTimeNs)
			matched = append(matched, ej)
		}
		return nil
	}
	err := eventtime.Entries(s.st, q.Device, fromNs, toNs, arrivedBefore, maxEventsScan, fn)
	if errors.Is(err, eventtime.ErrScanCap) {
		return nil, hubapi.BadParam("from", "the range needs more than %d of the device's log entries read: narrow from/to", maxEventsScan)
	}
	if err != nil {
		return nil, err
	}
	slices.SortFunc(matched, func(a, b hubapi.EventJSON) int {
		return cmp.Or(cmp.Compare(a.EventNs, b.EventNs), strings.Compare(a.Stream, b.Stream), cmp.Compare(a.Seq, b.Seq))
	})
	if len(matched) > q.Limit {
		out.Truncated, out.NextFrom = true, matched[q.Limit].Time
		matched = matched[:q.Limit]
	}
	if matched != nil {
		out.Events = matched
	}
	return out, nil
}

// RefusedGapPrefix starts the gap reason of events the hub refused one by
// one: "refused:bad_time", say. The registry records those gaps; the name
// stays here for the package's users.
const RefusedGapPrefix = registry.RefusedGapPrefix

func eventJSON(e *hublog.Entry, ev *AppliedEvent) hubapi.EventJSON {
	out := hubapi.EventJSON{Stream: e.Stream.String(), Seq: ev.Seq, Metric: ev.Metric, Value: ev.Value,
		Time: hubapi.RFC3339(time.Unix(0, ev.EventTimeNs)), TimeMs: ev.EventTimeNs / 1e6, UncertaintyNs: ev.UncertaintyNs,
		Method:     registry.MethodName(int32(ev.Method)),
		DeviceTime: hubapi.RFC3339(time.Unix(0, ev.DeviceTimeNs)), ServerTime: hubapi.RFC3339(time.Unix(0, e.ServerTimeNs)),
		LogPosition: e.Seq, EventNs: ev.EventTimeNs}
	if hublog.IsBackfilled(e.Seq) {
		out.LogPosition = 0 // read from the stream, not the local log
	}
	if len(ev.Tags) > 0 {
		out.Tags = make(map[string]string, len(ev.Tags))
		for _, t := range ev.Tags {
			out.Tags[t.Key] = t.Value
		}
	}
	return out
}
