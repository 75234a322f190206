package hub

import (
	"cmp"
	"context"
	"errors"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

// Bounds of GET /v1/events. The endpoint reads the log itself (the engine
// keeps aggregates, not events): the device's batch entries that the
// event-time index (eventindex.go) names for [from, to), whatever their
// arrival, keeping the events whose corrected time is in range. Cost: one
// log entry read and parsed per batch of the device with events in the
// range's index buckets (a minute, an hour or a day wide, see
// eventindex.go). arrived_within, when given, keeps only the entries that
// arrived before to + arrived_within. The scan is capped at maxEventsScan
// entries and maxEventsMatch matching events; past a cap the answer is a
// 400 that says to narrow from/to.
const (
	maxEventsScan     = 200_000
	maxEventsMatch    = 1_000_000
	maxEventsLimit    = 10_000
	defaultEventLimit = 1000
)

// EventsResponse is the body of GET /v1/events.
type EventsResponse struct {
	Device string      `json:"device"`
	From   string      `json:"from"`
	To     string      `json:"to"`
	Events []EventJSON `json:"events"`
	// Truncated is true when more events matched than limit; NextFrom is
	// the event time of the first one left out (from=NextFrom continues,
	// repeating events at exactly that time).
	Truncated bool   `json:"truncated"`
	NextFrom  string `json:"next_from,omitempty"`
	// Scanned counts the log entries read.
	Scanned int `json:"scanned"`
}

// EventJSON is one stored event as the hub applied it.
type EventJSON struct {
	Stream        string            `json:"stream"`
	Seq           uint64            `json:"seq"`
	Metric        string            `json:"metric"`
	Value         float64           `json:"value"`
	Tags          map[string]string `json:"tags,omitempty"`
	Time          string            `json:"time"`
	TimeMs        int64             `json:"time_ms"`
	UncertaintyNs int64             `json:"uncertainty_ns"`
	Method        string            `json:"method"`
	DeviceTime    string            `json:"device_time"`
	ServerTime    string            `json:"server_time"`
	LogPosition   uint64            `json:"log_position"`
	eventNs       int64
}

// eventsQuery is a parsed /v1/events request.
type eventsQuery struct {
	device, metric string
	from, to       time.Time
	limit          int
	arrival        time.Duration
}

func (s *Server) serveEvents(w http.ResponseWriter, r *http.Request) {
	p, err := newParams(r, "device", "metric", "from", "to", "limit", "arrived_within")
	if err != nil {
		writeAPIError(w, err)
		return
	}
	var q eventsQuery
	if q.device, err = p.required("device"); err == nil {
		q.metric = p.str("metric")
		q.from, q.to, err = p.timeRange()
	}
	if err == nil {
		q.limit, err = p.intIn("limit", defaultEventLimit, 1, maxEventsLimit)
	}
	if err == nil {
		q.arrival, err = p.duration("arrived_within", 0, s.agg.eng.Options().LateHorizon)
	}
	if err != nil {
		writeAPIError(w, err)
		return
	}
	out, err := s.storedEvents(r.Context(), q)
	if err != nil {
		s.writeQueryError(w, r, err, nil)
		return
	}
	writeData(w, out)
}

// storedEvents reads the device's events in [from, to) from the log and
// returns them in event-time order (then stream, then sequence).
// It stops with ctx's error when ctx is done.
func (s *Server) storedEvents(ctx context.Context, q eventsQuery) (*EventsResponse, error) {
	out := &EventsResponse{Device: q.device, From: rfc3339(q.from), To: rfc3339(q.to), Events: []EventJSON{}}
	arrivedBefore := int64(math.MaxInt64)
	if q.arrival > 0 {
		arrivedBefore = q.to.Add(q.arrival).UnixNano()
	}
	app := newApplier(nil, nil, nil, s.opts.Limits)
	fromNs, toNs := q.from.UnixNano(), q.to.UnixNano()
	var matched []EventJSON
	fn := func(e *walEntry) error {
		if out.Scanned++; out.Scanned%1024 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		if e.kind != entryBatch || e.device != q.device {
			return nil
		}
		v, err := app.parseStored(e)
		if err != nil {
			return err
		}
		for _, ev := range app.build(e, v).Events {
			if ev.EventTimeNs < fromNs || ev.EventTimeNs >= toNs || (q.metric != "" && ev.Metric != q.metric) {
				continue
			}
			if len(matched) == maxEventsMatch {
				return badParam("to", "more than %d events match: narrow from/to or add metric", maxEventsMatch)
			}
			matched = append(matched, eventJSON(e, &ev))
		}
		return nil
	}
	err := s.st.eventEntries(q.device, fromNs, toNs, arrivedBefore, maxEventsScan, fn)
	if errors.Is(err, errIndexScanCap) {
		return nil, badParam("from", "the range needs more than %d of the device's log entries read: narrow from/to", maxEventsScan)
	}
	if err != nil {
		return nil, err
	}
	slices.SortFunc(matched, func(a, b EventJSON) int {
		return cmp.Or(cmp.Compare(a.eventNs, b.eventNs), strings.Compare(a.Stream, b.Stream), cmp.Compare(a.Seq, b.Seq))
	})
	if len(matched) > q.limit {
		out.Truncated, out.NextFrom = true, matched[q.limit].Time
		matched = matched[:q.limit]
	}
	if matched != nil {
		out.Events = matched
	}
	return out, nil
}

func eventJSON(e *walEntry, ev *AppliedEvent) EventJSON {
	out := EventJSON{Stream: e.stream.String(), Seq: ev.Seq, Metric: ev.Metric, Value: ev.Value,
		Time: rfc3339(time.Unix(0, ev.EventTimeNs)), TimeMs: ev.EventTimeNs / 1e6, UncertaintyNs: ev.UncertaintyNs,
		Method:     methodName(int32(ev.Method)),
		DeviceTime: rfc3339(time.Unix(0, ev.DeviceTimeNs)), ServerTime: rfc3339(time.Unix(0, e.serverTimeNs)),
		LogPosition: e.seq, eventNs: ev.EventTimeNs}
	if len(ev.Tags) > 0 {
		out.Tags = make(map[string]string, len(ev.Tags))
		for _, t := range ev.Tags {
			out.Tags[t.Key] = t.Value
		}
	}
	return out
}

// firstWALAtOrAfter returns the smallest log position whose entry has a
// server time at or after ns, by binary search over positions (server
// times grow with positions, nearly: the clock is read before an entry
// gets its position). It returns the position after the last entry when
// there is none.
func (st *store) firstWALAtOrAfter(ns int64) (uint64, error) {
	var lo, hi uint64
	err := st.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixWAL}})
		defer it.Close()
		at := func(seq uint64) (uint64, int64, bool, error) {
			it.Seek(walSeekKey(seq))
			if !it.Valid() {
				return 0, 0, false, nil
			}
			p, t, err := parseWALKey(it.Item().Key())
			return p, t, true, err
		}
		first, _, ok, err := at(0)
		if err != nil || !ok {
			lo, hi = 1, 1
			return err
		}
		last, err := st.lastWALSeq()
		if err != nil {
			return err
		}
		lo, hi = first, last+1
		for lo < hi {
			mid := lo + (hi-lo)/2
			p, t, ok, err := at(mid)
			if err != nil {
				return err
			}
			if !ok || t >= ns {
				hi = mid
			} else {
				lo = p + 1
			}
		}
		return nil
	})
	return max(lo, 1), err
}
