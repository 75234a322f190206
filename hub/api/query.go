package api

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

	"edgeflow/aggregate"
	"edgeflow/hub/hubapi"
)

// registerQueryAPI adds the engine's endpoints to mux.
func (s *API) registerQueryAPI(mux *http.ServeMux) {
	if s.eng == nil {
		return
	}
	mux.HandleFunc("GET /v1/aggregates", s.whenRecovered(s.clustered(s.gated(s.serveAggregates), s.budgeted(s.serveClusterAggregates))))
	mux.HandleFunc("GET /v1/late", s.whenRecovered(s.serveLate))
	mux.HandleFunc("GET /v1/quarantine", s.whenRecovered(s.serveQuarantine))
	mux.HandleFunc("GET /v1/stream", s.whenRecovered(s.clustered(s.serveStream, s.serveClusterStream)))
	mux.HandleFunc("GET /v1/events", s.whenRecovered(s.clustered(s.localEvents, s.budgeted(s.serveClusterEvents))))
	// Partials are always this hub's own (hubd query and the fan-outs
	// merge them), with Edgeflow-Partitions in a cluster.
	mux.HandleFunc("GET /v1/partials", s.whenRecovered(s.clustered(s.gated(s.servePartials), nil)))
}

// whenRecovered answers 503 until recovery (checkpoint and replay) is
// done: before that the engine holds a partial state.
func (s *API) whenRecovered(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.b.Recovered() {
			w.Header().Set("Retry-After", "1")
			writeJSON(w, http.StatusServiceUnavailable, hubapi.APIError{Error: "recovering: the hub is replaying its log"})
			return
		}
		h(w, r)
	}
}

// aggregateQuery parses the parameters of /v1/aggregates (and the window
// part of /v1/stream) into an engine query; name is how the window was
// given.
func (s *API) aggregateQuery(p params, needRange bool) (q aggregate.Query, name string, err error) {
	if q.Metric, err = p.required("metric"); err != nil {
		return q, "", err
	}
	name = p.str("window")
	switch {
	case name == "" && len(s.eng.Options().Windows) > 0:
		name = s.eng.Options().Windows[0].Name
		q.WindowName = name
	case name == "":
		return q, "", hubapi.BadParam("window", "is required (no window is configured): e.g. tumbling:1m, hopping:5m/1m, sliding:5m, session:30s")
	case strings.Contains(name, ":"):
		if q.Window, err = aggregate.ParseWindowSpec(name); err != nil {
			return q, "", err
		}
	default:
		q.WindowName = name
	}
	if needRange {
		if q.From, q.To, err = p.timeRange(); err != nil {
			return q, "", err
		}
	}
	q.GroupBy = p.list("group_by")
	q.Device = p.str("device")
	if q.Aggs, err = aggregate.ParseAggs(p.list("aggs")); err != nil {
		return q, "", err
	}
	return q, name, nil
}

// aggregatesRequest reads GET /v1/aggregates' parameters (one hub's and
// the fleet's alike): the query, the configured window name it asked for
// ("" for a spec) and the engine's max_query_results its limit is within.
func (s *API) aggregatesRequest(r *http.Request) (q aggregate.Query, name string, maxResults int, err error) {
	p, err := newParams(r, "metric", "window", "from", "to", "group_by", "aggs", "limit", "device", "attr.*")
	if err != nil {
		return q, "", 0, err
	}
	if q, name, err = s.aggregateQuery(p, true); err != nil {
		return q, "", 0, err
	}
	q.AttrFilter = attrFilter(p)
	maxResults = s.eng.Options().MaxQueryResults
	q.Limit, err = p.intIn("limit", 0, 1, maxResults)
	return q, name, maxResults, err
}

func (s *API) serveAggregates(w http.ResponseWriter, r *http.Request) {
	q, name, maxResults, err := s.aggregatesRequest(r)
	if err != nil {
		writeAPIError(w, err)
		return
	}
	s.restrictToOwned(r, &q)
	res, err := s.eng.QueryContext(r.Context(), q)
	if err != nil {
		s.writeQueryError(w, r, err, func(le *aggregate.LimitError) error {
			if q.Limit > 0 && le.Max == q.Limit {
				return hubapi.BadParam("limit", "the query has more than %d windows: raise limit (at most max_query_results=%d) or narrow from/to, window or group_by", q.Limit, maxResults)
			}
			return le
		})
		return
	}
	head := hubapi.AggregatesResponse{Metric: q.Metric, Window: name, From: hubapi.RFC3339(q.From), To: hubapi.RFC3339(q.To), Aggs: q.Aggs.Names()}
	writeAggregates(w, head, res, q.Aggs)
}

// maxLateLimit caps one /v1/late answer.
const maxLateLimit = 10_000

func (s *API) serveLate(w http.ResponseWriter, r *http.Request) {
	p, err := newParams(r, "from", "limit")
	if err != nil {
		writeAPIError(w, err)
		return
	}
	limit, err := p.intIn("limit", 1000, 1, maxLateLimit)
	if err != nil {
		writeAPIError(w, err)
		return
	}
	next := s.eng.Stats().LateLogNext
	from, err := p.uint("from", 0)
	if err != nil {
		writeAPIError(w, err)
		return
	}
	if !p.has("from") {
		from = next - min(next, uint64(limit)) // the newest page
	}
	evs, nxt, err := s.eng.LateEvents(from, limit)
	if errors.Is(err, aggregate.ErrOffsetTooOld) {
		writeJSON(w, http.StatusBadRequest, hubapi.APIError{Error: "from " + err.Error(), Param: "from", Oldest: &nxt})
		return
	}
	if err != nil {
		writeAPIError(w, err)
		return
	}
	out := hubapi.LateResponse{Events: make([]hubapi.LateEventJSON, 0, len(evs)), Next: nxt, Total: next}
	for _, e := range evs {
		out.Events = append(out.Events, hubapi.LateEventJSON{
			HeldEventJSON: hubapi.HeldEvent(e.Offset, e.Device, e.Stream, e.Seq, e.Metric, e.Tags, e.Value, e.Time, e.Arrived),
			Watermark:     hubapi.RFC3339(e.Watermark), WatermarkMs: e.Watermark.UnixMilli()})
	}
	writeData(w, out)
}

// servePartials answers GET /v1/partials?metric=&from=&to=&group_by=&device=
// (and attr.KEY=VALUE filters) with the mergeable partial states of the
// metric (see aggregate.PartialSet), of one device's series when device is
// set, so a client can merge several hubs' answers exactly (QueryHubs).
// Attribute dimensions and filters are joined here, with this hub's table
// of the devices it holds.
func (s *API) servePartials(w http.ResponseWriter, r *http.Request) {
	p, err := newParams(r, "metric", "from", "to", "group_by", "device", "attr.*")
	if err != nil {
		writeAPIError(w, err)
		return
	}
	q := aggregate.Query{GroupBy: p.list("group_by"), Device: p.str("device"), AttrFilter: attrFilter(p)}
	if q.Metric, err = p.required("metric"); err != nil {
		writeAPIError(w, err)
		return
	}
	if q.From, q.To, err = p.timeRange(); err != nil {
		writeAPIError(w, err)
		return
	}
	s.restrictToOwned(r, &q)
	ps, err := s.eng.ExportPartialsContext(r.Context(), q)
	if err != nil {
		s.writeQueryError(w, r, err, nil)
		return
	}
	body, err := ps.MarshalBinary()
	if err != nil {
		writeAPIError(w, err)
		return
	}
	w.Header().Set("Content-Type", hubapi.PartialsContentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = w.Write(body)
}
