package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"edgeflow/aggregate"
	"edgeflow/hub/hubapi"
)

// writeAPIError answers err: 400 for bad parameters and limits (naming the
// parameter), 500 otherwise.
func writeAPIError(w http.ResponseWriter, err error) {
	var ape *aggregate.ParamError
	var le *aggregate.LimitError
	switch {
	case errors.As(err, &ape):
		writeJSON(w, http.StatusBadRequest, hubapi.APIError{Error: ape.Param + " " + ape.Reason, Param: ape.Param})
	case errors.As(err, &le):
		writeJSON(w, http.StatusBadRequest, hubapi.APIError{Error: le.Error(), Param: "to", Limit: le.Limit, Max: le.Max})
	default:
		writeJSON(w, http.StatusInternalServerError, hubapi.APIError{Error: err.Error()})
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
		return params{}, hubapi.BadParam("query", "is not a valid query string: %v", err)
	}
	names := make([]string, 0, len(v))
	for k := range v {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		if !slices.Contains(known, k) && !(slices.Contains(known, "attr.*") && strings.HasPrefix(k, aggregate.AttrPrefix)) {
			return params{}, hubapi.BadParam(k, "is not a parameter of %s (known: %s)", r.URL.Path, strings.Join(known, ", "))
		}
		if len(v[k]) > 1 {
			return params{}, hubapi.BadParam(k, "is given %d times", len(v[k]))
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
		return "", hubapi.BadParam(name, "is required")
	}
	return s, nil
}

// time reads an RFC 3339 time or Unix milliseconds; zero when absent.
func (p params) time(name string) (time.Time, error) {
	s := p.v.Get(name)
	if s == "" {
		return time.Time{}, nil
	}
	return hubapi.ParseQueryTime(name, s)
}

// timeRange reads the required from and to, from before to.
func (p params) timeRange() (from, to time.Time, err error) {
	for _, n := range []string{"from", "to"} {
		if p.v.Get(n) == "" {
			return from, to, hubapi.BadParam(n, "is required (RFC 3339 or Unix milliseconds)")
		}
	}
	if from, err = p.time("from"); err != nil {
		return
	}
	if to, err = p.time("to"); err != nil {
		return
	}
	if !from.Before(to) {
		return from, to, hubapi.BadParam("to", "must be after from")
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
		return 0, hubapi.BadParam(name, "%q must be an integer between %d and %d", s, lo, hi)
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
		return 0, hubapi.BadParam(name, "%q must be a non-negative integer", s)
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
		return false, hubapi.BadParam(name, "%q must be true or false", s)
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
		return 0, hubapi.BadParam(name, "%q must be a duration like 30m, positive and at most %v", s, max)
	}
	return d, nil
}

// list reads a comma-separated list (empty: nil).
func (p params) list(name string) []string { return hubapi.SplitList(p.v.Get(name)) }
