package simulator

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// VerifyOptions configure Verify.
type VerifyOptions struct {
	// HubURL is the hub's HTTP API, e.g. http://127.0.0.1:8080. Required
	// unless HubURLs is set.
	HubURL string
	// HubURLs are further hubs of a cluster (any hub answers for the whole
	// fleet), asked after HubURL: a request that a hub cannot answer now
	// (connection refused, a 502, 503 or 504, a 429, or an aggregate
	// answer marked partial because some partition had no owner within the
	// hub's wait) goes to the next one, so a verification survives a hub
	// that was killed. The hub that answered last is asked first.
	HubURLs []string
	// Retry is how long a request that no hub could answer now is asked
	// again (every hub in turn, pausing 250 ms after each round) before
	// it counts as failed: a partition whose hub died is answered again
	// once its lease expires and another hub takes it over. Default 60 s.
	Retry time.Duration
	// Windows are the window specs to check. Default: the truth's.
	Windows []string
	// Client makes the requests. Default: a client with a 60 s timeout.
	Client *http.Client
	// Concurrency bounds parallel per-device requests. Default 16.
	Concurrency int
	// MaxTimeDevices bounds the devices whose events are fetched for the
	// event-time error. Default 200.
	MaxTimeDevices int
	// Settle is how long a device whose applied ranges miss events is asked
	// again before they count as lost: the hub acks a batch once it is
	// durable and applies it a moment later, so a verification that starts
	// as the last ack arrives may find it not yet applied. Default 10 s.
	Settle time.Duration
	// AllowUnavailable keeps the report OK when a window kind could not
	// be checked at all (GET /v1/aggregates failed: missing, erroring, or
	// the hub runs another resolution). Default false: windows that were
	// not checked fail the verification, since nothing was verified.
	// Devices whose windows are unverifiable by design (events captured
	// before their clock was trusted) never fail it either way.
	AllowUnavailable bool
}

// Validate names the first field that is out of range.
func (o *VerifyOptions) Validate() error {
	if o.HubURL == "" && len(o.HubURLs) == 0 {
		return errors.New("simulator: HubURL or HubURLs: want http://host:port")
	}
	for _, h := range o.hubs() {
		u, err := url.Parse(h)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return fmt.Errorf("simulator: hub URL %q: want http://host:port", h)
		}
	}
	if o.Concurrency < 0 || o.MaxTimeDevices < 0 || o.Settle < 0 || o.Retry < 0 {
		return errors.New("simulator: Concurrency, MaxTimeDevices, Settle and Retry must not be negative")
	}
	return nil
}

// hubs is HubURL followed by HubURLs, without a trailing "/", empty ones
// and repeats left out.
func (o *VerifyOptions) hubs() []string {
	var out []string
	for _, h := range append([]string{o.HubURL}, o.HubURLs...) {
		if h = strings.TrimRight(h, "/"); h != "" && !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	return out
}

// VerifyReport is what the verifier found.
type VerifyReport struct {
	// OK is true when nothing was lost or duplicated, every checked window
	// matched, and every window kind could be checked (or
	// VerifyOptions.AllowUnavailable said not to mind).
	OK bool `json:"ok"`
	// Failures say, one line each, why OK is false.
	Failures []string `json:"failures,omitempty"`
	Devices  int      `json:"devices"`
	Unknown  int      `json:"devices_unknown_to_hub"`
	Events   uint64   `json:"events_appended"`
	Applied  uint64   `json:"events_applied"`
	// Lost are appended events the hub neither applied nor holds as a gap
	// the agent reported. Duplicated are applied sequence numbers beyond
	// the last one appended: the hub reports applied ranges, which are
	// sets, so an event applied twice inside [1, appended] cannot show
	// here; it shows only as a window whose count is too high (Differ),
	// and only for devices whose windows are verifiable.
	Lost        uint64        `json:"lost"`
	Duplicated  uint64        `json:"duplicated"`
	GapReported uint64        `json:"gap_events_reported"`
	LossDevices []string      `json:"loss_devices,omitempty"`
	Windows     []WindowCheck `json:"windows"`
	// UnavailableWindows counts the window kinds (per metric) that could
	// not be checked at all.
	UnavailableWindows int       `json:"windows_unavailable"`
	TimeError          TimeCheck `json:"event_time_error"`
}

// WindowCheck compares one window kind of one metric, grouped by device.
type WindowCheck struct {
	Window string `json:"window"`
	Metric string `json:"metric"`
	// Available is false when the hub's windows could not be read; Note
	// then says why, and nothing of this kind was compared.
	Available  bool   `json:"available"`
	Note       string `json:"note,omitempty"`
	Match      int    `json:"match"`
	Differ     int    `json:"differ"`
	Missing    int    `json:"missing"`
	Unexpected int    `json:"unexpected"`
	// UnverifiableDevices had events captured untrusted; their windows
	// are not compared.
	UnverifiableDevices int      `json:"unverifiable_devices"`
	Examples            []string `json:"examples,omitempty"`
}

// TimeCheck is the error of the hub's event times against true times
// (absolute, in the Quantiles' milliseconds), over the sampled events.
type TimeCheck struct {
	Measured bool `json:"measured"`
	// Partial is true when a request failed after some events were
	// measured: the quantiles cover those, and Note says where it stopped.
	Partial bool   `json:"partial,omitempty"`
	Note    string `json:"note,omitempty"`
	Quantiles
	// Bounded counts the measured events of a method other than
	// UNTRUSTED (those claim a bound) and Covered those among them whose
	// true time lies within the reported uncertainty of their event time:
	// Covered/Bounded is the bound's coverage, which should be 1.
	Bounded uint64 `json:"bounded"`
	Covered uint64 `json:"covered"`
}

// Coverage is Covered/Bounded, or 0 with no bounded events.
func (t TimeCheck) Coverage() float64 {
	if t.Bounded == 0 {
		return 0
	}
	return float64(t.Covered) / float64(t.Bounded)
}

// Verify checks the hub's answers against the ground truth: per-device
// applied ranges (loss, duplicates), windowed aggregates, event times.
func Verify(ctx context.Context, t *Truth, o VerifyOptions) (*VerifyReport, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.Client == nil {
		o.Client = &http.Client{Timeout: 60 * time.Second}
	}
	def(&o.Concurrency, 16)
	def(&o.MaxTimeDevices, 200)
	def(&o.Settle, 10*time.Second)
	def(&o.Retry, 60*time.Second)
	if len(o.Windows) == 0 {
		o.Windows = t.Windows
	}
	v := &verifier{o: o, t: t, bases: o.hubs()}
	rep := &VerifyReport{Devices: len(t.Devices), Events: t.Events()}
	if err := v.checkDevices(ctx, rep); err != nil {
		return nil, err
	}
	for _, w := range o.Windows {
		win, err := ParseWindow(w, t.Resolution)
		if err != nil {
			return nil, err
		}
		for _, m := range t.Metrics {
			rep.Windows = append(rep.Windows, v.checkWindows(ctx, win, m))
		}
	}
	rep.TimeError = v.checkTimes(ctx)
	rep.judge(o.AllowUnavailable)
	return rep, nil
}

// judge sets OK and Failures from the counts.
func (rep *VerifyReport) judge(allowUnavailable bool) {
	fail := func(f string, a ...any) { rep.Failures = append(rep.Failures, fmt.Sprintf(f, a...)) }
	if rep.Lost > 0 {
		fail("%d events lost", rep.Lost)
	}
	if rep.Duplicated > 0 {
		fail("%d events applied beyond what was appended", rep.Duplicated)
	}
	for _, w := range rep.Windows {
		switch {
		case !w.Available:
			rep.UnavailableWindows++
			if !allowUnavailable {
				fail("windows %s %s not checked: %s", w.Window, w.Metric, w.Note)
			}
		case w.Differ+w.Missing+w.Unexpected > 0:
			fail("windows %s %s: %d differ, %d missing, %d unexpected", w.Window, w.Metric, w.Differ, w.Missing, w.Unexpected)
		}
	}
	rep.OK = len(rep.Failures) == 0
}

type verifier struct {
	o     VerifyOptions
	t     *Truth
	bases []string
	// first is the index in bases of the hub asked first: the last one
	// that answered.
	first atomic.Int32
}

// httpError is a non-200 answer.
type httpError struct {
	code int
	body string
}

func (e *httpError) Error() string { return fmt.Sprintf("HTTP %d: %s", e.code, e.body) }

// unavailableError is a failure another hub, or the same one a moment
// later, may not have: the hub is unreachable, says it cannot answer now,
// or answered for part of the fleet only.
type unavailableError struct {
	hub string
	err error
}

func (e *unavailableError) Error() string { return e.hub + ": " + e.err.Error() }
func (e *unavailableError) Unwrap() error { return e.err }

// partialAnswer is implemented by answers a cluster's hub marks partial.
type partialAnswer interface {
	partialMissing() (bool, []int)
}

// get asks the hubs for path, the last one that answered first, and
// decodes the 200 answer into out. A failure another hub or a later try
// may not have (unavailableError) moves on to the next hub, pausing after
// each round, for up to Retry; any other error is returned at once.
func (v *verifier) get(ctx context.Context, path string, q url.Values, out any) error {
	deadline := time.Now().Add(v.o.Retry)
	n := int32(len(v.bases))
	for try := int32(1); ; try++ {
		i := v.first.Load()
		err := v.getFrom(ctx, v.bases[i], path, q, out)
		var ue *unavailableError
		if err == nil || !errors.As(err, &ue) || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		v.first.CompareAndSwap(i, (i+1)%n)
		if try%n == 0 {
			select {
			case <-time.After(250 * time.Millisecond):
			case <-ctx.Done():
				return err
			}
		}
	}
}

// getFrom is one request to one hub.
func (v *verifier) getFrom(ctx context.Context, base, path string, q url.Values, out any) error {
	u := base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := v.o.Client.Do(req)
	if err != nil {
		return &unavailableError{base, err}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<30))
	if err != nil {
		return &unavailableError{base, err}
	}
	if resp.StatusCode != http.StatusOK {
		he := &httpError{resp.StatusCode, strings.TrimSpace(string(body[:min(len(body), 300)]))}
		switch resp.StatusCode {
		case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			return &unavailableError{base, he}
		}
		return he
	}
	// A fresh value: an earlier try's answer (its "partial": true, which a
	// whole answer omits) must not show through.
	if rv := reflect.ValueOf(out); rv.Kind() == reflect.Pointer && !rv.IsNil() {
		rv.Elem().SetZero()
	}
	if err := json.Unmarshal(body, out); err != nil {
		return err
	}
	if pa, ok := out.(partialAnswer); ok {
		if partial, missing := pa.partialMissing(); partial {
			return &unavailableError{base, fmt.Errorf("partial answer: partitions %v missing", missing)}
		}
	}
	return nil
}

// hubDevice is the part of GET /v1/devices/{id} the verifier reads.
type hubDevice struct {
	Streams []struct {
		StreamID string      `json:"stream_id"`
		Applied  [][2]uint64 `json:"applied"`
		Gaps     [][2]uint64 `json:"gaps"`
	} `json:"streams"`
}

func (v *verifier) checkDevices(ctx context.Context, rep *VerifyReport) error {
	var mu sync.Mutex
	var firstErr error
	sem := make(chan struct{}, v.o.Concurrency)
	var wg sync.WaitGroup
	settled := time.Now().Add(v.o.Settle)
	for _, d := range v.t.Devices {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			var (
				applied, gaps [][2]uint64
				lc            RangeCheck
				unknown       bool
			)
			for {
				var hd hubDevice
				err := v.get(ctx, "/v1/devices/"+url.PathEscape(d.Device), nil, &hd)
				var he *httpError
				unknown = errors.As(err, &he) && he.code == http.StatusNotFound
				if err != nil && !unknown {
					mu.Lock()
					firstErr = cmpOr(firstErr, fmt.Errorf("simulator: verify device %s: %w", d.Device, err))
					mu.Unlock()
					return
				}
				applied, gaps = nil, nil
				for _, s := range hd.Streams {
					if s.StreamID == d.StreamID {
						applied, gaps = s.Applied, s.Gaps
					}
				}
				lc = CompareRanges(d.Appended, applied, gaps)
				if lc.Lost == 0 || time.Now().After(settled) || ctx.Err() != nil {
					break
				}
				time.Sleep(100 * time.Millisecond) // not applied yet, or lost
			}
			mu.Lock()
			defer mu.Unlock()
			if unknown {
				rep.Unknown++
			}
			rep.Applied += lc.Applied
			rep.Lost += lc.Lost
			rep.Duplicated += lc.Extra
			rep.GapReported += lc.Gaps
			if (lc.Lost > 0 || lc.Extra > 0) && len(rep.LossDevices) < 20 {
				rep.LossDevices = append(rep.LossDevices, fmt.Sprintf("%s: lost %d, extra %d (applied %v)", d.Device, lc.Lost, lc.Extra, applied))
			}
		}()
	}
	wg.Wait()
	slices.Sort(rep.LossDevices)
	return firstErr
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// RangeCheck compares what a stream appended, [1, appended], with what the
// hub applied and the gaps it recorded.
type RangeCheck struct {
	Applied, Gaps, Lost, Extra uint64
}

// CompareRanges counts applied events, reported gaps, lost events (in
// [1, appended] but neither applied nor a gap) and extra ones (applied
// beyond appended). applied and gaps are sorted, disjoint [first, last]
// ranges as the hub reports them.
func CompareRanges(appended uint64, applied, gaps [][2]uint64) RangeCheck {
	var c RangeCheck
	in := func(rs [][2]uint64) (inside, outside uint64) {
		for _, r := range rs {
			if r[1] < r[0] {
				continue
			}
			n := r[1] - r[0] + 1
			if r[0] > appended {
				outside += n
			} else if r[1] > appended {
				outside += r[1] - appended
				inside += appended - r[0] + 1
			} else {
				inside += n
			}
		}
		return
	}
	var extraApplied uint64
	c.Applied, extraApplied = in(applied)
	c.Gaps, _ = in(gaps)
	c.Extra = extraApplied
	if covered := c.Applied + c.Gaps; covered < appended {
		c.Lost = appended - covered
	}
	return c
}

// hubWindows is GET /v1/aggregates' answer.
type hubWindows struct {
	Windows []struct {
		Start time.Time         `json:"start"`
		Group map[string]string `json:"group"`
		Count uint64            `json:"count"`
		Sum   float64           `json:"sum"`
		Min   float64           `json:"min"`
		Max   float64           `json:"max"`
		Avg   float64           `json:"avg"`
	} `json:"windows"`
	// Partial is set by a cluster's hub that answered without some
	// partitions (MissingPartitions): such an answer is not compared.
	Partial           bool  `json:"partial"`
	MissingPartitions []int `json:"missing_partitions"`
}

func (h *hubWindows) partialMissing() (bool, []int) { return h.Partial, h.MissingPartitions }

func (v *verifier) checkWindows(ctx context.Context, w Window, metric string) WindowCheck {
	wc := WindowCheck{Window: w.Spec, Metric: metric}
	exp, unver := v.t.Expected(w, metric)
	wc.UnverifiableDevices = len(unver)
	first, last, ok := v.t.Span()
	if !ok {
		wc.Available, wc.Note = true, "no trusted events"
		return wc
	}
	slide := int64(w.Slide)
	from := floorDiv(first-int64(w.Size)+slide, slide) * slide
	to := floorDiv(last, slide)*slide + slide
	got := map[WindowKey]Agg{}
	if err := v.fetchWindows(ctx, w, metric, from, to, got, 0); err != nil {
		var he *httpError
		if errors.As(err, &he) && (he.code == http.StatusNotFound || he.code == http.StatusMethodNotAllowed) {
			wc.Note = "GET /v1/aggregates not available on this hub (" + he.Error() + ")"
		} else {
			wc.Note = err.Error()
		}
		return wc
	}
	wc.Available = true
	skip := map[string]bool{}
	for _, d := range unver {
		skip[d] = true
	}
	known := map[string]bool{}
	for _, d := range v.t.Devices {
		known[d.Device] = true
	}
	example := func(f string, a ...any) {
		if len(wc.Examples) < 10 {
			wc.Examples = append(wc.Examples, fmt.Sprintf(f, a...))
		}
	}
	for k, e := range exp {
		g, ok := got[k]
		switch {
		case !ok:
			wc.Missing++
			example("missing %s %s: want count %d", k.Device, time.Unix(0, k.Start).UTC().Format(time.RFC3339), e.Count)
		case sameAgg(e, g):
			wc.Match++
		default:
			wc.Differ++
			example("differ %s %s: want count %d sum %g min %g max %g, hub count %d sum %g min %g max %g", k.Device,
				time.Unix(0, k.Start).UTC().Format(time.RFC3339), e.Count, e.Sum, e.Min, e.Max, g.Count, g.Sum, g.Min, g.Max)
		}
	}
	for k, g := range got {
		if _, ok := exp[k]; !ok && known[k.Device] && !skip[k.Device] && g.Count > 0 {
			wc.Unexpected++
			example("unexpected %s %s: hub count %d", k.Device, time.Unix(0, k.Start).UTC().Format(time.RFC3339), g.Count)
		}
	}
	slices.Sort(wc.Examples)
	return wc
}

// fetchWindows reads windows starting in [from, to), halving the range
// when the hub says the query is too large.
func (v *verifier) fetchWindows(ctx context.Context, w Window, metric string, from, to int64, into map[WindowKey]Agg, depth int) error {
	q := url.Values{}
	q.Set("metric", metric)
	q.Set("window", w.Spec)
	q.Set("from", time.Unix(0, from).UTC().Format(time.RFC3339Nano))
	q.Set("to", time.Unix(0, to).UTC().Format(time.RFC3339Nano))
	q.Set("group_by", "device")
	q.Set("aggs", "count,sum,min,max,avg")
	var hw hubWindows
	err := v.get(ctx, "/v1/aggregates", q, &hw)
	var he *httpError
	if errors.As(err, &he) && he.code == http.StatusBadRequest && strings.Contains(he.body, "exceeds") && depth < 20 {
		slide := int64(w.Slide)
		mid := floorDiv(from+(to-from)/2, slide) * slide
		if mid > from && mid < to {
			if err := v.fetchWindows(ctx, w, metric, from, mid, into, depth+1); err != nil {
				return err
			}
			return v.fetchWindows(ctx, w, metric, mid, to, into, depth+1)
		}
	}
	if err != nil {
		return err
	}
	for _, x := range hw.Windows {
		into[WindowKey{x.Group["device"], x.Start.UnixNano()}] = Agg{Count: x.Count, Sum: x.Sum, Min: x.Min, Max: x.Max}
	}
	return nil
}

// sameAgg compares exactly, but for float sums added in another order.
func sameAgg(a, b Agg) bool {
	if a.Count != b.Count || a.Min != b.Min || a.Max != b.Max {
		return false
	}
	return math.Abs(a.Sum-b.Sum) <= 1e-9*math.Max(1, math.Max(math.Abs(a.Sum), math.Abs(b.Sum)))
}

// checkTimes fetches stored events of a sample of devices from GET
// /v1/events and compares their event times with the true times.
func (v *verifier) checkTimes(ctx context.Context) TimeCheck {
	first, last, ok := v.t.Span()
	if !ok {
		return TimeCheck{Note: "no events"}
	}
	var h Histogram
	var bounded, covered uint64
	n := 0
	for _, d := range v.t.Devices {
		if n >= v.o.MaxTimeDevices {
			break
		}
		if len(d.Samples) == 0 {
			continue
		}
		n++
		want := make(map[uint64]int64, len(d.Samples))
		for _, s := range d.Samples {
			want[s.Seq] = s.TrueNs
		}
		from := time.Unix(0, first-int64(time.Hour)).UTC().Format(time.RFC3339Nano)
		to := time.Unix(0, last+int64(time.Hour)).UTC().Format(time.RFC3339Nano)
		for page := 0; page < 1000 && from != ""; page++ {
			q := url.Values{}
			q.Set("device", d.Device)
			q.Set("from", from)
			q.Set("to", to)
			q.Set("limit", "10000")
			var raw any
			if err := v.get(ctx, "/v1/events", q, &raw); err != nil {
				return timesFailed(&h, d.Device, err)
			}
			for _, e := range eventList(raw) {
				if sid, ok := cmp.Or(e["stream_id"], e["stream"]).(string); ok && sid != d.StreamID {
					continue
				}
				seq, ok1 := number(e["seq"])
				et, ok2 := eventTime(e)
				if !ok1 || !ok2 {
					continue
				}
				if tn, ok := want[uint64(seq)]; ok {
					h.Observe(time.Duration(et-tn), 1)
					if m, _ := e["method"].(string); m != "" && !strings.Contains(m, "UNTRUSTED") {
						u, _ := number(e["uncertainty_ns"])
						bounded++
						if math.Abs(float64(et-tn)) <= u {
							covered++
						}
					}
				}
			}
			// Follow the hub's paging (truncated + next_from), if any.
			from = ""
			if m, ok := raw.(map[string]any); ok && m["truncated"] == true {
				from, _ = m["next_from"].(string)
			}
		}
	}
	s := h.Summary()
	if s.Count == 0 {
		return TimeCheck{Note: "not measured: GET /v1/events gave no events with seq and event_time of the sampled devices"}
	}
	return TimeCheck{Measured: true, Quantiles: s, Bounded: bounded, Covered: covered}
}

// timesFailed is checkTimes' answer when a request for device's events
// failed: what was measured before, marked partial, or not measured.
func timesFailed(h *Histogram, device string, err error) TimeCheck {
	why := err.Error()
	var he *httpError
	if errors.As(err, &he) && (he.code == http.StatusNotFound || he.code == http.StatusMethodNotAllowed) {
		why = "GET /v1/events not available on this hub (" + why + ")"
	}
	s := h.Summary()
	if s.Count == 0 {
		return TimeCheck{Note: "not measured: " + why}
	}
	return TimeCheck{Measured: true, Partial: true, Quantiles: s,
		Note: fmt.Sprintf("partial: %d events measured before GET /v1/events for %s failed: %s", s.Count, device, why)}
}

// eventList finds the events in GET /v1/events' answer: a top-level array
// or the array under "events".
func eventList(raw any) []map[string]any {
	var arr []any
	switch x := raw.(type) {
	case []any:
		arr = x
	case map[string]any:
		arr, _ = x["events"].([]any)
	}
	var out []map[string]any
	for _, e := range arr {
		if m, ok := e.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

func number(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case string:
		f, err := strconv.ParseFloat(x, 64)
		return f, err == nil
	}
	return 0, false
}

// eventTime reads event_time_ns (number), or event_time or time (RFC 3339).
func eventTime(e map[string]any) (int64, bool) {
	if f, ok := number(e["event_time_ns"]); ok {
		return int64(f), true
	}
	if s, ok := cmp.Or(e["event_time"], e["time"]).(string); ok {
		t, err := time.Parse(time.RFC3339Nano, s)
		return t.UnixNano(), err == nil
	}
	return 0, false
}
