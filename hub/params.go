package hub

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"edgeflow/aggregate"
	"edgeflow/hub/batchview"
)

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
}

// badParam is a bad query parameter: the engine's *aggregate.ParamError,
// so the API answers both alike and clients (hubd query) see one type.
func badParam(param, format string, args ...any) error {
	return &aggregate.ParamError{Param: param, Reason: fmt.Sprintf(format, args...)}
}

// writeAPIError answers err: 400 for bad parameters and limits (naming the
// parameter), 500 otherwise.
func writeAPIError(w http.ResponseWriter, err error) {
	var ape *aggregate.ParamError
	var le *aggregate.LimitError
	switch {
	case errors.As(err, &ape):
		writeJSON(w, http.StatusBadRequest, APIError{Error: ape.Param + " " + ape.Reason, Param: ape.Param})
	case errors.As(err, &le):
		writeJSON(w, http.StatusBadRequest, APIError{Error: le.Error(), Param: "to", Limit: le.Limit, Max: le.Max})
	default:
		writeJSON(w, http.StatusInternalServerError, APIError{Error: err.Error()})
	}
}

// writeData writes a (possibly large) JSON body without indentation.
func writeData(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// params reads a request's query parameters: each at most once, and only
// those the endpoint knows.
type params struct{ v url.Values }

// newParams rejects unknown and repeated parameters.
func newParams(r *http.Request, known ...string) (params, error) {
	v, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return params{}, badParam("query", "is not a valid query string: %v", err)
	}
	names := make([]string, 0, len(v))
	for k := range v {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		if !slices.Contains(known, k) {
			return params{}, badParam(k, "is not a parameter of %s (known: %s)", r.URL.Path, strings.Join(known, ", "))
		}
		if len(v[k]) > 1 {
			return params{}, badParam(k, "is given %d times", len(v[k]))
		}
	}
	return params{v}, nil
}

func (p params) str(name string) string { return p.v.Get(name) }

func (p params) has(name string) bool { return p.v.Has(name) }

// required returns a non-empty parameter.
func (p params) required(name string) (string, error) {
	s := p.v.Get(name)
	if s == "" {
		return "", badParam(name, "is required")
	}
	return s, nil
}

// time reads an RFC 3339 time or Unix milliseconds; zero when absent.
func (p params) time(name string) (time.Time, error) {
	s := p.v.Get(name)
	if s == "" {
		return time.Time{}, nil
	}
	return parseAPITime(name, s)
}

// parseAPITime reads an RFC 3339 time or an integer of Unix milliseconds.
func parseAPITime(name, s string) (time.Time, error) {
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		if ms < batchview.MinTimeNs/1e6 || ms >= batchview.MaxTimeNs/1e6 {
			return time.Time{}, badParam(name, "%d Unix milliseconds is outside the years 2000 to 2200", ms)
		}
		return time.UnixMilli(ms).UTC(), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, badParam(name, "%q is neither RFC 3339 (2025-06-01T12:00:00Z) nor Unix milliseconds", s)
	}
	if !batchview.SaneTime(t.UnixNano()) || t.Year() < 2000 || t.Year() >= 2200 {
		return time.Time{}, badParam(name, "%q is outside the years 2000 to 2200", s)
	}
	return t.UTC(), nil
}

// timeRange reads the required from and to, from before to.
func (p params) timeRange() (from, to time.Time, err error) {
	for _, n := range []string{"from", "to"} {
		if p.v.Get(n) == "" {
			return from, to, badParam(n, "is required (RFC 3339 or Unix milliseconds)")
		}
	}
	if from, err = p.time("from"); err != nil {
		return
	}
	if to, err = p.time("to"); err != nil {
		return
	}
	if !from.Before(to) {
		return from, to, badParam("to", "must be after from")
	}
	return from, to, nil
}

// intIn reads an integer in [lo, hi]; def when absent.
func (p params) intIn(name string, def, lo, hi int) (int, error) {
	s := p.v.Get(name)
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < lo || n > hi {
		return 0, badParam(name, "%q must be an integer between %d and %d", s, lo, hi)
	}
	return n, nil
}

// uint reads an unsigned integer; def when absent.
func (p params) uint(name string, def uint64) (uint64, error) {
	s := p.v.Get(name)
	if s == "" {
		return def, nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, badParam(name, "%q must be a non-negative integer", s)
	}
	return n, nil
}

// bool reads true/false/1/0; def when absent.
func (p params) bool(name string, def bool) (bool, error) {
	s := p.v.Get(name)
	if s == "" {
		return def, nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return false, badParam(name, "%q must be true or false", s)
	}
	return b, nil
}

// duration reads a Go duration in (0, max]; def when absent.
func (p params) duration(name string, def, max time.Duration) (time.Duration, error) {
	s := p.v.Get(name)
	if s == "" {
		return def, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 || d > max {
		return 0, badParam(name, "%q must be a duration like 30m, positive and at most %v", s, max)
	}
	return d, nil
}

// list reads a comma-separated list (empty: nil).
func (p params) list(name string) []string { return SplitList(p.v.Get(name)) }

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
func rfc3339(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
