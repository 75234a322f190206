package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"edgeflow/aggregate"
	"edgeflow/hub/hubapi"
)

// queryTokenEnv holds the hubs' bearer token when --token is not given
// (flags show in ps).
const queryTokenEnv = "HUBD_QUERY_TOKEN"

const queryUsage = `Usage: hubd query --hub URL [--hub URL ...] --metric NAME --window KIND:SIZE|DURATION --from TIME --to TIME [flags]

Answers a windowed-aggregate query over several hubs that each own part of
the fleet: it fetches every hub's mergeable partials (GET /v1/partials) and
merges them, so the answer is the one a single hub fed every event would
give. Parameters are spelled as GET /v1/aggregates spells them; times are
RFC 3339 or Unix milliseconds. The token may come from ` + queryTokenEnv + `.

Exit status: 0 answered; 1 a hub was unreachable or refused (the message
names it); 2 a bad flag (the message names it).

Flags:
`

// newQueryFlags declares the flags of `hubd query`.
func newQueryFlags() *pflag.FlagSet {
	fs := pflag.NewFlagSet("hubd query", pflag.ContinueOnError)
	fs.SortFlags = false
	fs.Var(&hubURLs{}, "hub", "base URL of a hub, e.g. http://hub-a:8080; repeat (or comma-separate) for every hub that owns part of the fleet")
	fs.String("metric", "", "metric name (required)")
	fs.String("window", "", "window as kind:size (tumbling:1m, hopping:5m/1m, sliding:5m, session:30s) or a duration for a tumbling window (10s); required, a multiple of the hubs' resolution")
	fs.String("from", "", "windows starting at or after this time: RFC 3339 or Unix milliseconds (required)")
	fs.String("to", "", "windows starting before this time (required)")
	fs.String("group-by", "", "comma-separated dimensions: device, metric, a tag key or attr.KEY (a device attribute, joined by each hub with its table) (empty: one group)")
	fs.String("aggs", "", "comma-separated aggregates: count, sum, min, max, avg, last, p50, p95, p99 (empty: all)")
	fs.String("device", "", "only this device's series")
	fs.Int("limit", 0, "most windows to answer, more is an error (0: max_query_results, 100000)")
	fs.String("token", "", "bearer token of the hubs' HTTP API (prefer "+queryTokenEnv+": flags show in ps)")
	fs.Duration("timeout", 30*time.Second, "time the whole query may take")
	fs.String("format", "table", "output: table, json (one array of the windows of GET /v1/aggregates) or ndjson")
	return fs
}

// hubURLs is the repeatable --hub flag; "a,b" is two hubs.
type hubURLs []string

func (h *hubURLs) String() string { return strings.Join(*h, ",") }

func (h *hubURLs) Type() string { return "url" }

func (h *hubURLs) Set(s string) error {
	for u := range strings.SplitSeq(s, ",") {
		u = strings.TrimSuffix(strings.TrimSpace(u), "/")
		p, err := url.Parse(u)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" || p.RawQuery != "" || p.Fragment != "" {
			return fmt.Errorf("%q is not a hub's base URL like http://hub-a:8080", u)
		}
		if slices.Contains(*h, u) {
			return fmt.Errorf("%s is given twice (its events would count twice)", u)
		}
		*h = append(*h, u)
	}
	return nil
}

// queryRequest is a parsed `hubd query` command line.
type queryRequest struct {
	hubs    []string
	token   string
	timeout time.Duration
	format  string
	// q is what is sent to hubapi.QueryHubs.
	q aggregate.Query
}

// flagError is a bad flag value: exit status 2, naming the flag.
type flagError struct{ flag, reason string }

func (e *flagError) Error() string { return "--" + e.flag + ": " + e.reason }

// queryParamFlags maps the parameter names of aggregate.ParamError (the
// HTTP API's) to the flags that set them.
var queryParamFlags = map[string]string{
	"metric": "metric", "window": "window", "size": "window", "slide": "window", "gap": "window",
	"from": "from", "to": "to", "group_by": "group-by", "aggs": "aggs", "device": "device", "limit": "limit", "hubs": "hub",
}

// paramFlagError names the flag of a bad query parameter.
func paramFlagError(pe *aggregate.ParamError) *flagError {
	flag, ok := queryParamFlags[pe.Param]
	if !ok {
		return &flagError{flag: pe.Param, reason: pe.Reason}
	}
	if flag != pe.Param && strings.ReplaceAll(flag, "-", "_") != pe.Param {
		return &flagError{flag: flag, reason: pe.Param + " " + pe.Reason}
	}
	return &flagError{flag: flag, reason: pe.Reason}
}

// runQuery is `hubd query`.
func runQuery(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := newQueryFlags()
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	if errors.Is(err, pflag.ErrHelp) {
		fmt.Fprint(stdout, queryUsage+fs.FlagUsages())
		return 0
	}
	if err == nil && fs.NArg() > 0 {
		err = fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if err != nil {
		fmt.Fprintf(stderr, "hubd query: %v (see hubd query --help)\n", err)
		return 2
	}
	req, err := parseQueryRequest(fs, getenv)
	if err != nil {
		fmt.Fprintf(stderr, "hubd query: %v\n", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), req.timeout)
	defer cancel()
	res, err := hubapi.QueryHubs(ctx, &http.Client{}, req.hubs, req.token, req.q)
	if err != nil {
		code, msg := explainQueryError(err, req)
		fmt.Fprintf(stderr, "hubd query: %s\n", msg)
		return code
	}
	if err := writeWindows(stdout, req, hubapi.WindowsJSON(res, req.q.Aggs)); err != nil {
		fmt.Fprintf(stderr, "hubd query: writing the answer: %v\n", err)
		return 1
	}
	return 0
}

// parseQueryRequest checks the flags; an error is a *flagError or a pflag
// error, both naming the flag.
func parseQueryRequest(fs *pflag.FlagSet, getenv func(string) string) (*queryRequest, error) {
	str := func(name string) string { s, _ := fs.GetString(name); return strings.TrimSpace(s) }
	req := &queryRequest{hubs: *fs.Lookup("hub").Value.(*hubURLs), token: str("token"), format: str("format")}
	if len(req.hubs) == 0 {
		return nil, &flagError{"hub", "is required: the base URL of every hub to merge, e.g. --hub http://hub-a:8080 --hub http://hub-b:8080"}
	}
	if req.token == "" {
		req.token = getenv(queryTokenEnv)
	}
	if !slices.Contains([]string{"table", "json", "ndjson"}, req.format) {
		return nil, &flagError{"format", fmt.Sprintf("%q is not table, json or ndjson", req.format)}
	}
	req.timeout, _ = fs.GetDuration("timeout")
	if req.timeout <= 0 {
		return nil, &flagError{"timeout", "must be positive"}
	}
	q := &req.q
	if q.Metric = str("metric"); q.Metric == "" {
		return nil, &flagError{"metric", "is required"}
	}
	var err error
	if q.Window, err = parseQueryWindow(str("window")); err != nil {
		return nil, err
	}
	if q.From, q.To, err = parseQueryRange(str("from"), str("to")); err != nil {
		return nil, err
	}
	if q.GroupBy, err = parseGroupBy(str("group-by")); err != nil {
		return nil, err
	}
	if q.Aggs, err = aggregate.ParseAggs(hubapi.SplitList(str("aggs"))); err != nil {
		return nil, queryParamError(err)
	}
	q.Device = str("device")
	if q.Limit, _ = fs.GetInt("limit"); q.Limit < 0 {
		return nil, &flagError{"limit", "must not be negative (0: max_query_results)"}
	}
	return req, nil
}

// parseQueryWindow reads an explicit window, or a bare duration (10s, 1m)
// as a tumbling window of that size, as the hubs read it: other configured
// window names are per hub, so they cannot be merged.
func parseQueryWindow(s string) (aggregate.WindowSpec, error) {
	if s == "" {
		return aggregate.WindowSpec{}, &flagError{"window", "is required: kind:size or a duration, e.g. tumbling:1m, 10s, hopping:5m/1m, sliding:5m, session:30s"}
	}
	if !strings.Contains(s, ":") {
		if _, err := time.ParseDuration(s); err != nil {
			return aggregate.WindowSpec{}, &flagError{"window", fmt.Sprintf("want kind:size or a duration (tumbling:1m, 10s, hopping:5m/1m, sliding:5m, session:30s), got %q: configured window names are per hub and cannot be merged", s)}
		}
		s = "tumbling:" + s
	}
	w, err := aggregate.ParseWindowSpec(s)
	if err != nil {
		return w, queryParamError(err)
	}
	if w.Size < 0 || w.Slide < 0 || w.Gap < 0 || (w.Kind == aggregate.Session && w.Gap == 0) || (w.Kind != aggregate.Session && w.Size == 0) {
		return w, &flagError{"window", fmt.Sprintf("%q: durations must be positive", s)}
	}
	return w, nil
}

// parseQueryRange reads the required from and to, from before to.
func parseQueryRange(from, to string) (f, t time.Time, err error) {
	if from == "" {
		return f, t, &flagError{"from", "is required (RFC 3339 or Unix milliseconds)"}
	}
	if to == "" {
		return f, t, &flagError{"to", "is required (RFC 3339 or Unix milliseconds)"}
	}
	if f, err = hubapi.ParseQueryTime("from", from); err != nil {
		return f, t, queryParamError(err)
	}
	if t, err = hubapi.ParseQueryTime("to", to); err != nil {
		return f, t, queryParamError(err)
	}
	if !f.Before(t) {
		return f, t, &flagError{"to", "must be after --from"}
	}
	return f, t, nil
}

// parseGroupBy reads --group-by: distinct, non-empty dimensions.
func parseGroupBy(s string) ([]string, error) {
	dims := hubapi.SplitList(s)
	for i, d := range dims {
		if d == "" {
			return nil, &flagError{"group-by", fmt.Sprintf("%q has an empty dimension", s)}
		}
		if slices.Contains(dims[:i], d) {
			return nil, &flagError{"group-by", fmt.Sprintf("dimension %q repeated", d)}
		}
	}
	return dims, nil
}

// queryParamError turns an *aggregate.ParamError into the flag's error.
func queryParamError(err error) error {
	var pe *aggregate.ParamError
	if errors.As(err, &pe) {
		return paramFlagError(pe)
	}
	return err
}

// explainQueryError classifies a QueryHubs failure: the merge's verdict on
// the parameters (exit status 2, naming the flag) or a hub's failure
// (1; FetchPartials names the hub and quotes its answer).
func explainQueryError(err error, req *queryRequest) (code int, msg string) {
	var pe *aggregate.ParamError
	var le *aggregate.LimitError
	switch {
	case errors.As(err, &pe):
		return 2, paramFlagError(pe).Error()
	case errors.As(err, &le):
		return 2, (&flagError{"limit", fmt.Sprintf("the query has more than %d windows: raise --limit (at most max_query_results, 100000) or narrow --from/--to, --window or --group-by", le.Max)}).Error()
	case errors.Is(err, aggregate.ErrInvalidQuery):
		// The hubs' partial sets disagree (resolution, sketch accuracy,
		// allowed lateness): the error numbers them in --hub order.
		named := make([]string, len(req.hubs))
		for i, h := range req.hubs {
			named[i] = fmt.Sprintf("set %d is %s", i, h)
		}
		return 1, fmt.Sprintf("the hubs' answers cannot be merged (%s): %v", strings.Join(named, ", "), err)
	}
	return 1, err.Error()
}

// writeWindows writes the answer in req.format.
func writeWindows(w io.Writer, req *queryRequest, wins []hubapi.WindowJSON) error {
	switch req.format {
	case "json":
		return json.NewEncoder(w).Encode(wins)
	case "ndjson":
		enc := json.NewEncoder(w)
		for i := range wins {
			if err := enc.Encode(&wins[i]); err != nil {
				return err
			}
		}
		return nil
	}
	return writeTable(w, req.q.GroupBy, req.q.Aggs, wins)
}

// writeTable writes aligned columns: start, end, one per group dimension,
// one per aggregate asked for, final and revision. A missing value (an
// empty window's min, say) is "-".
func writeTable(w io.Writer, groupBy []string, aggs aggregate.Aggs, wins []hubapi.WindowJSON) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	names := aggs.Names()
	fmt.Fprintln(tw, strings.Join(slices.Concat([]string{"start", "end"}, groupBy, names, []string{"final", "revision"}), "\t"))
	row := make([]string, 0, 4+len(groupBy)+len(names))
	for i := range wins {
		win := &wins[i]
		row = append(row[:0], win.Start, win.End)
		for _, d := range groupBy {
			row = append(row, orDash(win.Group[d]))
		}
		for _, n := range names {
			row = append(row, aggCell(win, n))
		}
		row = append(row, strconv.FormatBool(win.Final), strconv.FormatUint(win.Revision, 10))
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	return tw.Flush()
}

// aggCell formats one aggregate of a window for the table.
func aggCell(w *hubapi.WindowJSON, name string) string {
	var v *float64
	switch name {
	case "count":
		return strconv.FormatUint(w.Count, 10)
	case "sum":
		v = w.Sum
	case "min":
		v = w.Min
	case "max":
		v = w.Max
	case "avg":
		v = w.Avg
	case "last":
		v = w.Last
	case "p50":
		v = w.P50
	case "p95":
		v = w.P95
	case "p99":
		v = w.P99
	}
	if v == nil {
		return "-"
	}
	return strconv.FormatFloat(*v, 'g', 10, 64)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
