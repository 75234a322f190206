package hubapi

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
	"edgeflow/hub/batchview"
	"edgeflow/hub/ranges"
	"edgeflow/wire"
)

// AggregatesResponse is the body of GET /v1/aggregates.
type AggregatesResponse struct {
	Metric string   `json:"metric"`
	Window string   `json:"window"`
	From   string   `json:"from"`
	To     string   `json:"to"`
	Aggs   []string `json:"aggs"`
	// Partial is true when a hub of a cluster answered without some
	// partitions (no owner, or only a stale one, within http-cluster-wait):
	// MissingPartitions lists them, and no window is final.
	Partial           bool  `json:"partial,omitempty"`
	MissingPartitions []int `json:"missing_partitions,omitempty"`
	// Windows stays the last field: the API streams it after the rest.
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

// WindowsJSON converts query results (of an engine, or of QueryHubs) to
// the windows of GET /v1/aggregates: only the aggregates in aggs are set
// (pass what aggregate.ParseAggs returns; unlike a query's, zero Aggs here
// sets none but count).
func WindowsJSON(res []aggregate.WindowResult, aggs aggregate.Aggs) []WindowJSON {
	out := make([]WindowJSON, len(res))
	for i := range res {
		out[i] = windowJSON(&res[i], aggs)
	}
	return out
}

func windowJSON(r *aggregate.WindowResult, a aggregate.Aggs) WindowJSON {
	w := WindowJSON{Start: RFC3339(r.Start), End: RFC3339(r.End), StartMs: r.Start.UnixMilli(), EndMs: r.End.UnixMilli(),
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
		w.LastTime = RFC3339(r.LastTime)
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
func HeldEvent(off uint64, device string, stream aggregate.StreamID, seq uint64, metric string, tags []aggregate.Tag, value float64, t, arrived time.Time) HeldEventJSON {
	return HeldEventJSON{Offset: off, Device: device, Stream: StreamHex(stream), Seq: seq, Metric: metric, Tags: TagMap(tags),
		Value: value, Time: RFC3339(t), TimeMs: t.UnixMilli(), Arrived: RFC3339(arrived)}
}

// LateEventJSON is one event that arrived beyond late_horizon.
type LateEventJSON struct {
	HeldEventJSON
	Watermark   string `json:"watermark"`
	WatermarkMs int64  `json:"watermark_ms"`
}

func TagMap(tags []aggregate.Tag) map[string]string {
	if len(tags) == 0 {
		return nil
	}
	m := make(map[string]string, len(tags))
	for _, t := range tags {
		m[t.Key] = t.Value
	}
	return m
}

func StreamHex(id aggregate.StreamID) string { return wire.StreamID(id).String() }

// PartialsContentType is the media type of GET /v1/partials: an
// aggregate.PartialSet in its versioned binary encoding.
const PartialsContentType = "application/vnd.edgeflow.partials.v1"

// FetchPartials gets one hub's partial set of q.Metric over [from, to)
// grouped by q.GroupBy (of q.Device's series only, when set; attribute
// dimensions and q.AttrFilter joined by that hub) from GET
// /v1/partials at baseURL (e.g. http://hub-a:8080). token, when set, is
// sent as a bearer token. A hub busy with other queries (429) is asked
// again after its Retry-After, up to fetchBusyTries times within ctx.
func FetchPartials(ctx context.Context, client *http.Client, baseURL, token string, q aggregate.Query, from, to time.Time) (*aggregate.PartialSet, error) {
	ps, _, err := fetchPartialsWith(ctx, client, baseURL, token, q, from, to, nil)
	return ps, err
}

// fetchPartialsWith is FetchPartials with extra query parameters; it also
// returns the answer's header.
func fetchPartialsWith(ctx context.Context, client *http.Client, baseURL, token string, q aggregate.Query, from, to time.Time, extra url.Values) (*aggregate.PartialSet, http.Header, error) {
	v := url.Values{"metric": {q.Metric}, "from": {strconv.FormatInt(from.UnixMilli(), 10)},
		"to": {strconv.FormatInt(to.UnixMilli(), 10)}}
	if len(q.GroupBy) > 0 {
		v.Set("group_by", strings.Join(q.GroupBy, ","))
	}
	if q.Device != "" {
		v.Set("device", q.Device)
	}
	for k, val := range q.AttrFilter {
		v.Set(aggregate.AttrPrefix+k, val)
	}
	for k, vs := range extra {
		v[k] = vs
	}
	u := strings.TrimSuffix(baseURL, "/") + "/v1/partials?" + v.Encode()
	for try := 1; ; try++ {
		ps, h, wait, err := fetchPartialsOnce(ctx, client, baseURL, u, token)
		if wait == 0 || try == fetchBusyTries {
			return ps, h, err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, nil, fmt.Errorf("%w (then %w)", err, ctx.Err())
		case <-t.C:
		}
	}
}

// fetchBusyTries is how many times FetchPartials asks a busy hub.
const fetchBusyTries = 4

// fetchPartialsOnce asks once; wait is the Retry-After of a 429 (bounded
// to 1s..30s), zero otherwise.
func fetchPartialsOnce(ctx context.Context, client *http.Client, baseURL, u, token string) (*aggregate.PartialSet, http.Header, time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("partials from %s: %w", baseURL, err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("partials from %s: %w", baseURL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxPartialsBody+1))
	if err != nil {
		return nil, nil, 0, fmt.Errorf("partials from %s: %w", baseURL, err)
	}
	if resp.StatusCode != http.StatusOK {
		err := fmt.Errorf("partials from %s: %s: %s", baseURL, resp.Status, strings.TrimSpace(string(body)))
		if resp.StatusCode == http.StatusTooManyRequests {
			secs, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
			return nil, nil, time.Duration(min(max(secs, 1), 30)) * time.Second, err
		}
		return nil, nil, 0, err
	}
	if len(body) > maxPartialsBody {
		return nil, nil, 0, fmt.Errorf("partials from %s: answer larger than %d bytes: narrow from/to or group_by", baseURL, maxPartialsBody)
	}
	ps, err := aggregate.DecodePartialSet(body)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("partials from %s: %w", baseURL, err)
	}
	return ps, resp.Header, 0, nil
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
		return nil, BadParam("window", "give the window as kind:size (e.g. tumbling:1m) when merging hubs, not a configured name")
	}
	from, to := PartialsRange(q)
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
	// Backfilling is true while a cluster-mode hub restored from a state
	// snapshot fills its local log from the stream: events the snapshot
	// covers may be missing from the answer until it is done.
	Backfilling bool `json:"backfilling,omitempty"`
	// IncompleteBefore (RFC 3339), when set, says that batches the stream
	// stored before this time were gone (retention) when the hub
	// backfilled its log: events they held may be missing.
	IncompleteBefore string `json:"incomplete_before,omitempty"`
	// MissingHubs (cluster mode) are the hubs that did not answer for
	// their local logs: events they applied while they owned the device's
	// partition, before its current owner took it over, may be missing.
	MissingHubs []string `json:"missing_hubs,omitempty"`
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
	// LogPosition is the entry's position in the hub's local log; 0 for
	// an event backfilled from the stream (cluster mode), which has none.
	LogPosition uint64 `json:"log_position"`
	// Attributes are the device's attributes in force at the event's
	// event time (the attribute table's version then; absent: none).
	Attributes map[string]string `json:"attributes,omitempty"`
	// Hub (cluster mode) is the hub whose local log holds the event, the
	// log LogPosition is a position in.
	Hub     string `json:"hub,omitempty"`
	EventNs int64  `json:"-"` // the sort key, not in the answer
}

// QuarantineResponse is the body of GET /v1/quarantine.
type QuarantineResponse struct {
	Events []QuarantinedEventJSON `json:"events"`
	// Next is the offset to ask for next (from=next).
	Next uint64 `json:"next"`
	// Held is how many events the quarantine holds now.
	Held int `json:"held"`
	// Quarantined counts events held for being beyond future_horizon,
	// HeldForPartials those held for max_live_partials, Released those
	// that entered their windows since and Dropped those a full quarantine
	// dropped, all since the engine started.
	Quarantined     uint64 `json:"quarantined"`
	HeldForPartials uint64 `json:"held_for_partials"`
	Released        uint64 `json:"released"`
	Dropped         uint64 `json:"dropped"`
}

// QuarantinedEventJSON is one held event.
type QuarantinedEventJSON struct {
	HeldEventJSON
	UncertaintyMs int64  `json:"uncertainty_ms"`
	EntersAt      string `json:"enters_at"`
	Reason        string `json:"reason"`
}

// StreamUpdate is the data of the final, revised and watermark events of
// GET /v1/stream. Windows holds the window's results for the requested
// metric (when metric is given).
type StreamUpdate struct {
	Window      string       `json:"window,omitempty"`
	Metric      string       `json:"metric,omitempty"`
	Start       string       `json:"start,omitempty"`
	End         string       `json:"end,omitempty"`
	StartMs     int64        `json:"start_ms,omitempty"`
	EndMs       int64        `json:"end_ms,omitempty"`
	Watermark   string       `json:"watermark,omitempty"`
	WatermarkMs int64        `json:"watermark_ms,omitempty"`
	Windows     []WindowJSON `json:"windows,omitempty"`
}

// StreamEventJSON is one event of the merged stream (SSE event "event",
// whose id is Offset).
type StreamEventJSON struct {
	Offset uint64            `json:"offset"`
	Device string            `json:"device"`
	Stream string            `json:"stream"`
	Seq    uint64            `json:"seq"`
	Metric string            `json:"metric"`
	Tags   map[string]string `json:"tags,omitempty"`
	Value  float64           `json:"value"`
	Time   string            `json:"time"`
	TimeMs int64             `json:"time_ms"`
	Late   bool              `json:"late"`
	// Attributes are the device's attributes in force at the event's
	// event time, as the table holds them when the event is sent.
	Attributes map[string]string `json:"attributes,omitempty"`
}

// DevicesResponse is the body of GET /v1/devices: one page of devices,
// sorted by id. Next is set only when more devices follow; a client asks
// again with after=Next until it is absent.
type DevicesResponse struct {
	Devices []DeviceInfo `json:"devices"`
	Next    string       `json:"next,omitempty"`
	// Partial and MissingPartitions: as in AggregatesResponse; the
	// devices of the missing partitions are not listed.
	Partial           bool  `json:"partial,omitempty"`
	MissingPartitions []int `json:"missing_partitions,omitempty"`
}

// DeviceInfo is what GET /v1/devices/{id} returns about a device.
type DeviceInfo struct {
	ID       string       `json:"id"`
	LastSeen time.Time    `json:"last_seen"`
	Online   bool         `json:"online"`
	Status   string       `json:"status"` // "online", "offline" or "unknown"
	Version  string       `json:"version,omitempty"`
	Clock    ClockInfo    `json:"clock"`
	Backlog  Backlog      `json:"backlog"`
	Streams  []StreamInfo `json:"streams"`
	// StreamCount is how many streams the device holds; MaxStreams is the
	// hub's bound (max-streams-per-device), beyond which a batch opening
	// one more is answered RETRY_LATER too_many_streams until one is
	// retired after stream-idle-expiry without a batch.
	StreamCount int `json:"stream_count"`
	MaxStreams  int `json:"max_streams"`
	// Buffer is how full the agent's buffer was at its last online status
	// (absent: an agent that does not report it).
	Buffer *BufferFill `json:"buffer,omitempty"`
}

// BufferFill is how full an agent's buffer is, as its status reported it:
// how close the device is to dropping events while it is offline.
type BufferFill struct {
	// CapacityBytes is the buffer's bound, UsedBytes what it holds (both
	// uncompressed records), Fill their ratio (0 without a bound).
	CapacityBytes uint64  `json:"capacity_bytes"`
	UsedBytes     uint64  `json:"used_bytes"`
	Fill          float64 `json:"fill"`
	// FillRate is the recent change of UsedBytes in bytes/s (negative
	// while it drains), measured over RateIntervalNs; 0: no rate yet.
	FillRate       float64 `json:"fill_rate"`
	RateIntervalNs int64   `json:"rate_interval_ns,omitempty"`
	// ReportedAt is the server time of the status that carried it.
	ReportedAt time.Time `json:"reported_at"`
}

// ClockInfo is the clock estimate the hub uses for a device.
type ClockInfo struct {
	OffsetNs      int64   `json:"offset_ns"`
	UncertaintyNs int64   `json:"uncertainty_ns"`
	DriftPPM      float64 `json:"drift_ppm"`
	// Method is the TimeMethod name without its prefix: NTP, HUB_SYNC,
	// REPAIRED, DEVICE, HUB_ESTIMATE or UNTRUSTED.
	Method string `json:"method"`
	// Source is "agent" (the agent's own estimate), "hub" (the hub's
	// estimate from batch timing) or "none".
	Source string `json:"source"`
}

// StreamInfo describes one stream of a device.
type StreamInfo struct {
	StreamID   string            `json:"stream_id"`
	Applied    ranges.RangeSet   `json:"applied"`
	Events     uint64            `json:"events"`
	Batches    uint64            `json:"batches"`
	Gaps       ranges.RangeSet   `json:"gaps"`
	GapEvents  uint64            `json:"gap_events"`
	GapReasons map[string]uint64 `json:"gap_reasons,omitempty"`
	// Refused are the sequence numbers whose events the hub refused one by
	// one (also in Gaps, with reason "refused:<class>").
	Refused       ranges.RangeSet `json:"refused"`
	RefusedEvents uint64          `json:"refused_events"`
	LastSeen      time.Time       `json:"last_seen"`
}

// APIError is the body of every 4xx and 5xx answer of the query API:
// Param names the offending query parameter when there is one.
type APIError struct {
	Error string `json:"error"`
	Param string `json:"param,omitempty"`
	// Limit and Max name the cap a request hit (e.g. max_query_results).
	Limit string `json:"limit,omitempty"`
	Max   int    `json:"max,omitempty"`
	// Oldest is the oldest offset still held, when from is too old.
	Oldest *uint64 `json:"oldest,omitempty"`
	// Stored, on an attribute write that failed part way (cluster mode),
	// is how many of its first versions the stream stored: they will be
	// applied; the rest may not have been stored.
	Stored *int `json:"stored,omitempty"`
}

// ParseQueryTime reads a time the way the query API reads from and to: RFC
// 3339 (2025-06-01T12:00:00Z) or an integer of Unix milliseconds, within
// the years 2000 to 2200. A bad value is an *aggregate.ParamError naming
// param.
func ParseQueryTime(name, s string) (time.Time, error) {
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		if ms < batchview.MinTimeNs/1e6 || ms >= batchview.MaxTimeNs/1e6 {
			return time.Time{}, BadParam(name, "%d Unix milliseconds is outside the years 2000 to 2200", ms)
		}
		return time.UnixMilli(ms).UTC(), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, BadParam(name, "%q is neither RFC 3339 (2025-06-01T12:00:00Z) nor Unix milliseconds", s)
	}
	if !batchview.SaneTime(t.UnixNano()) || t.Year() < 2000 || t.Year() >= 2200 {
		return time.Time{}, BadParam(name, "%q is outside the years 2000 to 2200", s)
	}
	return t.UTC(), nil
}

// SplitList reads a comma-separated parameter (group_by, aggs) as the
// query API does: items trimmed of spaces, an empty string gives nil.
func SplitList(s string) []string {
	if s == "" {
		return nil
	}
	parts := strings.Split(s, ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts
}

// rfc3339 formats t for the API.
func RFC3339(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// BadParam is a bad query parameter: the engine's *aggregate.ParamError,
// so the API answers both alike and clients (hubd query) see one type.
func BadParam(param, format string, args ...any) error {
	return &aggregate.ParamError{Param: param, Reason: fmt.Sprintf(format, args...)}
}

// maxPartialsBody bounds a /v1/partials answer a client reads.
const maxPartialsBody = 1 << 30

// Backlog is what an agent reported it still holds for the hub.
type Backlog struct {
	Events   uint64 `json:"events"`
	Bytes    uint64 `json:"bytes"`
	OldestNs int64  `json:"oldest_ns,omitempty"`
}
