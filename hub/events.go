package hub

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"edgeflow/hub/api"
	"edgeflow/hub/hubapi"
	"edgeflow/hub/hublog"
)

// Bounds of GET /v1/events. The endpoint reads the log itself (the engine
// keeps aggregates, not events): the device's batch entries whose server
// time is in [from - max_future_skew - eventsSlack, to + arrived_within),
// found through the device log index (devicelog.go), keeping the events
// in range. Cost: one log entry read and parsed per batch the device sent
// in that server-time span. For arrivals from before the index existed
// it finds the first entry of the span by binary search over positions
// and reads the whole fleet's entries in log order. Either scan is capped
// at maxEventsScan entries and maxEventsMatch matching events; past a cap
// the answer is a 400 that says to narrow from/to or arrived_within.
const (
	maxEventsScan  = 200_000
	maxEventsMatch = 1_000_000
	eventsSlack    = hublog.ServerTimeSlack
)

// errStopScan ends a log scan early.
var errStopScan = errors.New("stop scan")

// storedEvents reads the device's events in [from, to) from the log and
// returns them in event-time order (then stream, then sequence).
// It stops with ctx's error when ctx is done.
func (s *Server) storedEvents(ctx context.Context, q api.EventsQuery) (*hubapi.EventsResponse, error) {
	out := &hubapi.EventsResponse{Device: q.Device, From: hubapi.RFC3339(q.From), To: hubapi.RFC3339(q.To), Events: []hubapi.EventJSON{}}
	startNs := q.From.Add(-s.agg.eng.Options().MaxFutureSkew - eventsSlack).UnixNano()
	endNs := q.To.Add(q.Arrival).UnixNano()
	app := newApplier(nil, nil, nil, s.opts.Limits)
	fromNs, toNs := q.From.UnixNano(), q.To.UnixNano()
	var matched []hubapi.EventJSON
	var reads string // what the scan reads, for the error past maxEventsScan
	fn := func(e *hublog.Entry) error {
		if out.Scanned++; out.Scanned > maxEventsScan {
			return hubapi.BadParam("from", "the range needs more than %d log entries read (%s): narrow from/to or arrived_within", maxEventsScan, reads)
		}
		if out.Scanned%1024 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		if e.Kind != hublog.KindBatch || e.Device != q.Device || e.ServerTimeNs >= endNs {
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
			matched = append(matched, eventJSON(e, &ev))
		}
		return nil
	}
	var err error
	if startNs >= s.st.DeviceLogSince {
		// The device's own entries, through the device log index.
		reads = "the device's batches that arrived between from - max_future_skew - 1m and to + arrived_within"
		err = s.st.DeviceEntries(q.Device, startNs, endNs, fn)
	} else {
		// Before the index: the whole fleet's entries, by position.
		reads = "the whole fleet's batches that arrived between from and to + arrived_within; the device index covers arrivals after " + hubapi.RFC3339(time.Unix(0, s.st.DeviceLogSince))
		var start uint64
		if start, err = s.st.FirstWALAtOrAfter(startNs); err == nil {
			err = s.st.Replay(start-1, func(e *hublog.Entry) error {
				if e.ServerTimeNs >= endNs+int64(eventsSlack) {
					return errStopScan
				}
				return fn(e)
			})
		}
	}
	if err != nil && !errors.Is(err, errStopScan) {
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

func eventJSON(e *hublog.Entry, ev *AppliedEvent) hubapi.EventJSON {
	out := hubapi.EventJSON{Stream: e.Stream.String(), Seq: ev.Seq, Metric: ev.Metric, Value: ev.Value,
		Time: hubapi.RFC3339(time.Unix(0, ev.EventTimeNs)), TimeMs: ev.EventTimeNs / 1e6, UncertaintyNs: ev.UncertaintyNs,
		Method:     methodName(int32(ev.Method)),
		DeviceTime: hubapi.RFC3339(time.Unix(0, ev.DeviceTimeNs)), ServerTime: hubapi.RFC3339(time.Unix(0, e.ServerTimeNs)),
		LogPosition: e.Seq, EventNs: ev.EventTimeNs}
	if len(ev.Tags) > 0 {
		out.Tags = make(map[string]string, len(ev.Tags))
		for _, t := range ev.Tags {
			out.Tags[t.Key] = t.Value
		}
	}
	return out
}
