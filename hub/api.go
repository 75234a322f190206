package hub

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"edgeflow/aggregate"
	"edgeflow/wire"
)

// registerQueryAPI adds the engine's endpoints to mux.
func (s *Server) registerQueryAPI(mux *http.ServeMux) {
	if s.agg == nil {
		return
	}
	mux.HandleFunc("GET /v1/aggregates", s.whenRecovered(s.gated(s.serveAggregates)))
	mux.HandleFunc("GET /v1/late", s.whenRecovered(s.serveLate))
	mux.HandleFunc("GET /v1/quarantine", s.whenRecovered(s.serveQuarantine))
	mux.HandleFunc("GET /v1/stream", s.whenRecovered(s.serveStream))
	mux.HandleFunc("GET /v1/events", s.whenRecovered(s.gated(s.serveEvents)))
	mux.HandleFunc("GET /v1/partials", s.whenRecovered(s.gated(s.servePartials)))
}

// whenRecovered answers 503 until recovery (checkpoint and replay) is
// done: before that the engine holds a partial state.
func (s *Server) whenRecovered(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.recovered.Load() {
			w.Header().Set("Retry-After", "1")
			writeJSON(w, http.StatusServiceUnavailable, APIError{Error: "recovering: the hub is replaying its log"})
			return
		}
		h(w, r)
	}
}

// AggregatesResponse is the body of GET /v1/aggregates.
type AggregatesResponse struct {
	Metric  string       `json:"metric"`
	Window  string       `json:"window"`
	From    string       `json:"from"`
	To      string       `json:"to"`
	Aggs    []string     `json:"aggs"`
	Windows []WindowJSON `json:"windows"`
}

// WindowJSON is one window of one group. Aggregates that were not asked
// for are left out; times are RFC 3339 and Unix milliseconds.
type WindowJSON struct {
	Start    string            `json:"start"`
	End      string            `json:"end"`
	StartMs  int64             `json:"start_ms"`
	EndMs    int64             `json:"end_ms"`
	Group    map[string]string `json:"group"`
	Count    uint64            `json:"count"`
	Sum      *float64          `json:"sum,omitempty"`
	Min      *float64          `json:"min,omitempty"`
	Max      *float64          `json:"max,omitempty"`
	Avg      *float64          `json:"avg,omitempty"`
	Last     *float64          `json:"last,omitempty"`
	LastTime string            `json:"last_time,omitempty"`
	P50      *float64          `json:"p50,omitempty"`
	P95      *float64          `json:"p95,omitempty"`
	P99      *float64          `json:"p99,omitempty"`
	Final    bool              `json:"final"`
	Revision uint64            `json:"revision"`
	Late     uint64            `json:"late"`
	Behind   int               `json:"behind"`
}

// aggregateQuery parses the parameters of /v1/aggregates (and the window
// part of /v1/stream) into an engine query; name is how the window was
// given.
func (s *Server) aggregateQuery(p params, needRange bool) (q aggregate.Query, name string, err error) {
	if q.Metric, err = p.required("metric"); err != nil {
		return q, "", err
	}
	name = p.str("window")
	switch {
	case name == "" && len(s.agg.eng.Options().Windows) > 0:
		name = s.agg.eng.Options().Windows[0].Name
		q.WindowName = name
	case name == "":
		return q, "", badParam("window", "is required (no window is configured): e.g. tumbling:1m, hopping:5m/1m, sliding:5m, session:30s")
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

func (s *Server) serveAggregates(w http.ResponseWriter, r *http.Request) {
	p, err := newParams(r, "metric", "window", "from", "to", "group_by", "aggs", "limit", "device")
	if err != nil {
		writeAPIError(w, err)
		return
	}
	q, name, err := s.aggregateQuery(p, true)
	if err != nil {
		writeAPIError(w, err)
		return
	}
	maxResults := s.agg.eng.Options().MaxQueryResults
	if q.Limit, err = p.intIn("limit", 0, 1, maxResults); err != nil {
		writeAPIError(w, err)
		return
	}
	res, err := s.agg.eng.QueryContext(r.Context(), q)
	if err != nil {
		s.writeQueryError(w, r, err, func(le *aggregate.LimitError) error {
			if q.Limit > 0 && le.Max == q.Limit {
				return badParam("limit", "the query has more than %d windows: raise limit (at most max_query_results=%d) or narrow from/to, window or group_by", q.Limit, maxResults)
			}
			return le
		})
		return
	}
	head := AggregatesResponse{Metric: q.Metric, Window: name, From: rfc3339(q.From), To: rfc3339(q.To), Aggs: q.Aggs.Names()}
	writeAggregates(w, head, res, q.Aggs)
}

// windowsJSON converts query results.
func windowsJSON(res []aggregate.WindowResult, aggs aggregate.Aggs) []WindowJSON {
	out := make([]WindowJSON, len(res))
	for i := range res {
		out[i] = windowJSON(&res[i], aggs)
	}
	return out
}

func windowJSON(r *aggregate.WindowResult, a aggregate.Aggs) WindowJSON {
	w := WindowJSON{Start: rfc3339(r.Start), End: rfc3339(r.End), StartMs: r.Start.UnixMilli(), EndMs: r.End.UnixMilli(),
		Group: r.Group, Count: r.Count, Final: r.Final, Revision: r.Revision, Late: r.Late, Behind: r.Behind}
	if w.Group == nil {
		w.Group = map[string]string{}
	}
	set := func(agg aggregate.Aggs, dst **float64, v float64) {
		if a.Has(agg) && r.Count > 0 && !math.IsNaN(v) && !math.IsInf(v, 0) {
			*dst = &v
		}
	}
	set(aggregate.AggSum, &w.Sum, r.Sum)
	set(aggregate.AggMin, &w.Min, r.Min)
	set(aggregate.AggMax, &w.Max, r.Max)
	set(aggregate.AggAvg, &w.Avg, r.Avg)
	set(aggregate.AggLast, &w.Last, r.Last)
	set(aggregate.AggP50, &w.P50, r.P50)
	set(aggregate.AggP95, &w.P95, r.P95)
	set(aggregate.AggP99, &w.P99, r.P99)
	if w.Last != nil {
		w.LastTime = rfc3339(r.LastTime)
	}
	return w
}

// LateResponse is the body of GET /v1/late.
type LateResponse struct {
	Events []LateEventJSON `json:"events"`
	// Next is the offset to ask for next (from=next).
	Next uint64 `json:"next"`
	// Total counts every event sent to the late log so far.
	Total uint64 `json:"total"`
}

// HeldEventJSON is what the late log and the quarantine both say of an
// event they hold out of the windows: where it came from, what it said,
// and when its batch arrived.
type HeldEventJSON struct {
	Offset  uint64            `json:"offset"`
	Device  string            `json:"device"`
	Stream  string            `json:"stream"`
	Seq     uint64            `json:"seq"`
	Metric  string            `json:"metric"`
	Tags    map[string]string `json:"tags,omitempty"`
	Value   float64           `json:"value"`
	Time    string            `json:"time"`
	TimeMs  int64             `json:"time_ms"`
	Arrived string            `json:"arrived"`
}

// heldEvent fills a HeldEventJSON.
func heldEvent(off uint64, device string, stream aggregate.StreamID, seq uint64, metric string, tags []aggregate.Tag, value float64, t, arrived time.Time) HeldEventJSON {
	return HeldEventJSON{Offset: off, Device: device, Stream: streamHex(stream), Seq: seq, Metric: metric, Tags: tagMap(tags),
		Value: value, Time: rfc3339(t), TimeMs: t.UnixMilli(), Arrived: rfc3339(arrived)}
}

// LateEventJSON is one event that arrived beyond late_horizon.
type LateEventJSON struct {
	HeldEventJSON
	Watermark   string `json:"watermark"`
	WatermarkMs int64  `json:"watermark_ms"`
}

// maxLateLimit caps one /v1/late answer.
const maxLateLimit = 10_000

func (s *Server) serveLate(w http.ResponseWriter, r *http.Request) {
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
	next := s.agg.eng.Stats().LateLogNext
	from, err := p.uint("from", 0)
	if err != nil {
		writeAPIError(w, err)
		return
	}
	if !p.has("from") {
		from = next - min(next, uint64(limit)) // the newest page
	}
	evs, nxt, err := s.agg.eng.LateEvents(from, limit)
	if errors.Is(err, aggregate.ErrOffsetTooOld) {
		writeJSON(w, http.StatusBadRequest, APIError{Error: "from " + err.Error(), Param: "from", Oldest: &nxt})
		return
	}
	if err != nil {
		writeAPIError(w, err)
		return
	}
	out := LateResponse{Events: make([]LateEventJSON, 0, len(evs)), Next: nxt, Total: next}
	for _, e := range evs {
		out.Events = append(out.Events, LateEventJSON{
			HeldEventJSON: heldEvent(e.Offset, e.Device, e.Stream, e.Seq, e.Metric, e.Tags, e.Value, e.Time, e.Arrived),
			Watermark:     rfc3339(e.Watermark), WatermarkMs: e.Watermark.UnixMilli()})
	}
	writeData(w, out)
}

func tagMap(tags []aggregate.Tag) map[string]string {
	if len(tags) == 0 {
		return nil
	}
	m := make(map[string]string, len(tags))
	for _, t := range tags {
		m[t.Key] = t.Value
	}
	return m
}

func streamHex(id aggregate.StreamID) string { return wire.StreamID(id).String() }

// PartialsContentType is the media type of GET /v1/partials: an
// aggregate.PartialSet in its versioned binary encoding.
const PartialsContentType = "application/vnd.edgeflow.partials.v1"

// maxPartialsBody bounds a /v1/partials answer a client reads.
const maxPartialsBody = 1 << 30

// servePartials answers GET /v1/partials?metric=&from=&to=&group_by=&device=
// with the mergeable partial states of the metric (see
// aggregate.PartialSet), of one device's series when device is set, so a
// client can merge several hubs' answers exactly (QueryHubs).
func (s *Server) servePartials(w http.ResponseWriter, r *http.Request) {
	p, err := newParams(r, "metric", "from", "to", "group_by", "device")
	if err != nil {
		writeAPIError(w, err)
		return
	}
	q := aggregate.Query{GroupBy: p.list("group_by"), Device: p.str("device")}
	if q.Metric, err = p.required("metric"); err != nil {
		writeAPIError(w, err)
		return
	}
	if q.From, q.To, err = p.timeRange(); err != nil {
		writeAPIError(w, err)
		return
	}
	ps, err := s.agg.eng.ExportPartialsContext(r.Context(), q)
	if err != nil {
		s.writeQueryError(w, r, err, nil)
		return
	}
	body, err := ps.MarshalBinary()
	if err != nil {
		writeAPIError(w, err)
		return
	}
	w.Header().Set("Content-Type", PartialsContentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = w.Write(body)
}

// FetchPartials gets one hub's partial set of q.Metric over [from, to)
// grouped by q.GroupBy (of q.Device's series only, when set) from GET
// /v1/partials at baseURL (e.g. http://hub-a:8080). token, when set, is
// sent as a bearer token. A hub busy with other queries (429) is asked
// again after its Retry-After, up to fetchBusyTries times within ctx.
func FetchPartials(ctx context.Context, client *http.Client, baseURL, token string, q aggregate.Query, from, to time.Time) (*aggregate.PartialSet, error) {
	v := url.Values{"metric": {q.Metric}, "from": {strconv.FormatInt(from.UnixMilli(), 10)},
		"to": {strconv.FormatInt(to.UnixMilli(), 10)}}
	if len(q.GroupBy) > 0 {
		v.Set("group_by", strings.Join(q.GroupBy, ","))
	}
	if q.Device != "" {
		v.Set("device", q.Device)
	}
	u := strings.TrimSuffix(baseURL, "/") + "/v1/partials?" + v.Encode()
	for try := 1; ; try++ {
		ps, wait, err := fetchPartialsOnce(ctx, client, baseURL, u, token)
		if wait == 0 || try == fetchBusyTries {
			return ps, err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w (then %w)", err, ctx.Err())
		case <-t.C:
		}
	}
}

// fetchBusyTries is how many times FetchPartials asks a busy hub.
const fetchBusyTries = 4

// fetchPartialsOnce asks once; wait is the Retry-After of a 429 (bounded
// to 1s..30s), zero otherwise.
func fetchPartialsOnce(ctx context.Context, client *http.Client, baseURL, u, token string) (*aggregate.PartialSet, time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, 0, fmt.Errorf("partials from %s: %w", baseURL, err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("partials from %s: %w", baseURL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxPartialsBody+1))
	if err != nil {
		return nil, 0, fmt.Errorf("partials from %s: %w", baseURL, err)
	}
	if resp.StatusCode != http.StatusOK {
		err := fmt.Errorf("partials from %s: %s: %s", baseURL, resp.Status, strings.TrimSpace(string(body)))
		if resp.StatusCode == http.StatusTooManyRequests {
			secs, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
			return nil, time.Duration(min(max(secs, 1), 30)) * time.Second, err
		}
		return nil, 0, err
	}
	if len(body) > maxPartialsBody {
		return nil, 0, fmt.Errorf("partials from %s: answer larger than %d bytes: narrow from/to or group_by", baseURL, maxPartialsBody)
	}
	ps, err := aggregate.DecodePartialSet(body)
	if err != nil {
		return nil, 0, fmt.Errorf("partials from %s: %w", baseURL, err)
	}
	return ps, 0, nil
}

// maxSessionReach is how far past to QueryHubs fetches partials for
// session windows (the engine's default max_session_span).
const maxSessionReach = 24 * time.Hour

// QueryHubs answers q (an explicit q.Window; configured window names are
// per hub) from several hubs that each own part of the fleet: it fetches
// every hub's partials over the range the windows need and merges them
// with aggregate.QueryPartials, so the answer equals that of one hub fed
// every event (lateness aside: Late and Revision count each hub's late
// arrivals).
func QueryHubs(ctx context.Context, client *http.Client, hubs []string, token string, q aggregate.Query) ([]aggregate.WindowResult, error) {
	if len(hubs) == 0 {
		return nil, errors.New("query hubs: no hub given")
	}
	if q.WindowName != "" {
		return nil, badParam("window", "give the window as kind:size (e.g. tumbling:1m) when merging hubs, not a configured name")
	}
	from, to := q.From, q.To.Add(q.Window.Size)
	if q.Window.Kind == aggregate.Session {
		from, to = q.From.Add(-q.Window.Gap), q.To.Add(maxSessionReach)
	}
	sets := make([]*aggregate.PartialSet, len(hubs))
	for i, h := range hubs {
		ps, err := FetchPartials(ctx, client, h, token, q, from, to)
		if err != nil {
			return nil, err
		}
		sets[i] = ps
	}
	// The hubs left out other devices' series already; their sets are
	// grouped by q.GroupBy only, so the merge cannot tell devices apart.
	q.Device = ""
	return aggregate.QueryPartials(sets, q)
}
