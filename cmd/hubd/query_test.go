package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"edgeflow/aggregate"
	"edgeflow/hub"
	"edgeflow/hub/hubapi"
	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// queryTestToken is the read token of the test hubs.
const queryTestToken = "query-test-token-0123456789"

// startQueryHub starts a hub (embedded broker, engine, HTTP API) on
// loopback ports chosen at run time, its HTTP API behind queryTestToken.
// Streams never go idle during a test, so Final and Behind depend only on
// the events fed.
func startQueryHub(t *testing.T) *hub.Server {
	t.Helper()
	return startTestHub(t, hub.Options{DataDir: t.TempDir(), HTTPAddr: "127.0.0.1:0", MQTTListen: "127.0.0.1:0",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), HTTPReadToken: queryTestToken,
		CheckpointInterval: time.Hour, RetentionInterval: time.Hour, TickInterval: 50 * time.Millisecond,
		Aggregate: &aggregate.Options{TagKeys: []string{"site"}, IdleTimeout: time.Hour, WatermarkInterval: time.Nanosecond}})
}

// startTestHub starts an in-process hub with o, shut down when the test
// ends.
func startTestHub(t *testing.T, o hub.Options) *hub.Server {
	t.Helper()
	s, err := hub.New(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	return s
}

// queryFleet is what the test devices sent: per device, event times and
// values.
type queryFleet struct {
	base   time.Time
	events map[string][]queryEvent
}

type queryEvent struct {
	t time.Time
	v float64
}

// queryDevices are the test devices and their site tags: each site has a
// device on each of the two partial hubs, so grouping by site merges
// series of both.
var queryDevices = []struct{ id, site string }{{"dev-0", "s-a"}, {"dev-1", "s-b"}, {"dev-2", "s-a"}, {"dev-3", "s-b"}}

// feedHubs feeds dev-0 and dev-1 to a, dev-2 and dev-3 to b, and all four
// to all, through each hub's broker (the hub's own ingest path). One event
// per device at base first, then rounds of 30 s of events taking turns,
// each round applied everywhere before the next: no event is late, so the
// merged answer must equal all's in every field.
func feedHubs(t *testing.T, a, b, all *hub.Server) *queryFleet {
	t.Helper()
	f := &queryFleet{base: time.Now().UTC().Truncate(time.Minute).Add(-2 * time.Hour), events: map[string][]queryEvent{}}
	streams := map[string]wire.StreamID{}
	for _, d := range queryDevices {
		streams[d.id] = wire.NewStreamID()
	}
	seq := map[string]uint64{}
	total := map[*hub.Server]uint64{}
	for round := -1; round < 6; round++ {
		for k, d := range queryDevices {
			var evs []queryEvent
			if round < 0 {
				evs = append(evs, queryEvent{f.base, float64(k)})
			}
			for i := 1; round >= 0 && i <= 30; i++ {
				n := round*30 + i
				evs = append(evs, queryEvent{f.base.Add(time.Duration(n) * time.Second), float64((n*37+k*11)%400-150) / 8})
			}
			sid := streams[d.id]
			batch := &wirepb.Batch{DeviceId: d.id, StreamId: sid[:], FirstSeq: seq[d.id] + 1, SendTimeNs: time.Now().UnixNano(),
				Clock: &wirepb.ClockEstimate{Method: wirepb.TimeMethod_TIME_METHOD_NTP}}
			for i, e := range evs {
				batch.Events = append(batch.Events, &wirepb.Event{Metric: "temp", Value: e.v, DeviceTimeNs: e.t.UnixNano(),
					Tags: []*wirepb.Tag{{Key: "site", Value: d.site}}, MonoNs: int64(seq[d.id]) + int64(i), BootId: "b",
					Method: wirepb.TimeMethod_TIME_METHOD_NTP})
			}
			seq[d.id] += uint64(len(evs))
			f.events[d.id] = append(f.events[d.id], evs...)
			payload, err := wire.EncodeBatch(batch)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range []*hub.Server{[]*hub.Server{a, b}[k/2], all} {
				if err := s.Publish(wire.BatchTopic(d.id), payload); err != nil {
					t.Fatal(err)
				}
				total[s] += uint64(len(evs))
			}
		}
		for s, n := range total {
			waitEvents(t, s, f.base, n)
		}
	}
	return f
}

// waitEvents waits until the hub's engine holds want events of temp.
func waitEvents(t *testing.T, s *hub.Server, base time.Time, want uint64) {
	t.Helper()
	q := aggregate.Query{Metric: "temp", Window: aggregate.WindowSpec{Kind: aggregate.Tumbling, Size: time.Hour},
		From: base.Add(-time.Hour), To: base.Add(time.Hour), Aggs: aggregate.AggCount}
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := s.Engine().Query(q)
		if err != nil {
			t.Fatal(err)
		}
		var n uint64
		for _, w := range res {
			n += w.Count
		}
		if n == want {
			return
		}
		if n > want || time.Now().After(deadline) {
			t.Fatalf("hub %s holds %d events, want %d", s.HTTPAddr(), n, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// hubAggregates asks a hub's GET /v1/aggregates.
func hubAggregates(t *testing.T, s *hub.Server, v url.Values) hubapi.AggregatesResponse {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+s.HTTPAddr()+"/v1/aggregates?"+v.Encode(), nil)
	req.Header.Set("Authorization", "Bearer "+queryTestToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var r hubapi.AggregatesResponse
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &r) != nil {
		t.Fatalf("GET /v1/aggregates?%s: %s: %s", v.Encode(), resp.Status, body)
	}
	return r
}

// runQueryCmd runs `hubd query args...` and returns the exit status and
// outputs.
func runQueryCmd(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(append([]string{"query"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

// TestQueryMergesHubs runs `hubd query` against two hubs that each hold
// half of the fleet and checks its answer against a third hub fed every
// event: the JSON windows equal that hub's GET /v1/aggregates windows in
// every field, the table prints them, and counts and sums equal a
// brute-force computation.
func TestQueryMergesHubs(t *testing.T) {
	a, b, all := startQueryHub(t), startQueryHub(t), startQueryHub(t)
	f := feedHubs(t, a, b, all)
	t.Setenv(queryTokenEnv, queryTestToken)
	from, to := f.base.Format(time.RFC3339), strconv.FormatInt(f.base.Add(4*time.Minute).UnixMilli(), 10)
	hubs := []string{"--hub", "http://" + a.HTTPAddr(), "--hub", "http://" + b.HTTPAddr() + "/"}

	for _, c := range []struct{ window, groupBy, aggs, device string }{
		{"tumbling:1m", "", "", ""},
		{"tumbling:1m", "device", "count,sum", ""},
		{"tumbling:1m", "site", "count,sum,min,max,avg,last,p50,p95,p99", ""},
		{"hopping:2m/1m", "site,device", "count,p99", ""},
		{"session:20s", "device", "count,sum,last", ""},
		{"tumbling:30s", "site", "count,sum,max", "dev-2"},
	} {
		t.Run(strings.NewReplacer(":", "_", "/", "_").Replace(c.window)+"_"+c.groupBy+"_"+c.device, func(t *testing.T) {
			args := append([]string{"--metric", "temp", "--window", c.window, "--from", from, "--to", to,
				"--group-by", c.groupBy, "--aggs", c.aggs, "--device", c.device, "--format", "json"}, hubs...)
			code, out, errOut := runQueryCmd(args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			var got []hubapi.WindowJSON
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("json output: %v\n%s", err, out)
			}
			v := url.Values{"metric": {"temp"}, "window": {c.window}, "from": {from}, "to": {to}}
			for k, s := range map[string]string{"group_by": c.groupBy, "aggs": c.aggs, "device": c.device} {
				if s != "" {
					v.Set(k, s)
				}
			}
			want := hubAggregates(t, all, v).Windows
			if c.device != "" {
				// Merging picks one device's series by grouping by device, so
				// Behind counts that device's streams, not the fleet's.
				for _, ws := range [][]hubapi.WindowJSON{want, got} {
					for i := range ws {
						ws[i].Behind = 0
					}
				}
			}
			if len(want) == 0 || !jsonEqual(t, got, want) {
				t.Fatalf("merged answer differs from the single hub's:\n%s\nwant\n%s", mustJSON(t, got), mustJSON(t, want))
			}

			args[len(args)-len(hubs)-1] = "table"
			code, table, errOut := runQueryCmd(args...)
			if code != 0 {
				t.Fatalf("table: exit %d: %s", code, errOut)
			}
			aggs, _ := aggregate.ParseAggs(hubapi.SplitList(c.aggs))
			var wantTable bytes.Buffer
			if err := writeTable(&wantTable, hubapi.SplitList(c.groupBy), aggs, want); err != nil {
				t.Fatal(err)
			}
			if table != wantTable.String() {
				t.Fatalf("table:\n%s\nwant\n%s", table, wantTable.String())
			}
		})
	}

	// Brute force: per device and minute, the table's count and sum.
	code, table, errOut := runQueryCmd(append([]string{"--metric", "temp", "--window", "tumbling:1m", "--from", from, "--to", to,
		"--group-by", "device", "--aggs", "sum,count"}, hubs...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSuffix(table, "\n"), "\n")
	if h := strings.Fields(lines[0]); strings.Join(h, " ") != "start end device count sum final revision" {
		t.Fatalf("table header %q", lines[0])
	}
	want := map[string]string{}
	for dev, evs := range f.events {
		counts, sums := map[string]int{}, map[string]float64{}
		for _, e := range evs {
			start := e.t.Truncate(time.Minute).Format(time.RFC3339)
			counts[start]++
			sums[start] += e.v
		}
		for start, n := range counts {
			want[start+" "+dev] = fmt.Sprintf("%d %s", n, strconv.FormatFloat(sums[start], 'g', 10, 64))
		}
	}
	for _, l := range lines[1:] {
		c := strings.Fields(l)
		k := c[0] + " " + c[2]
		if got := c[3] + " " + c[4]; want[k] != got {
			t.Errorf("window %s: count and sum %q, want %q", k, got, want[k])
		}
		delete(want, k)
	}
	if len(want) > 0 {
		t.Errorf("windows missing from the table: %v\n%s", want, table)
	}
}

// jsonEqual compares two values by their JSON encoding.
func jsonEqual(t *testing.T, a, b any) bool { return mustJSON(t, a) == mustJSON(t, b) }

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestQueryFlagErrors: bad flags exit 2 with a message naming the flag,
// before any hub is asked.
func TestQueryFlagErrors(t *testing.T) {
	ok := []string{"--hub", "http://127.0.0.1:1", "--metric", "temp", "--window", "tumbling:1m",
		"--from", "2026-12-01T00:00:00Z", "--to", "2026-12-02T00:00:00Z"}
	with := func(flag, value string) []string {
		out := append([]string(nil), ok...)
		for i := 0; i < len(out); i += 2 {
			if out[i] == flag {
				if value == "" {
					return append(out[:i], out[i+2:]...)
				}
				out[i+1] = value
				return out
			}
		}
		return append(out, flag, value)
	}
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"missing hub", with("--hub", ""), "--hub: is required"},
		{"bad hub", with("--hub", "hub-a:8080"), `"--hub"`},
		{"same hub twice", append(with("--hub", "http://h:1"), "--hub", "http://h:1/"), "given twice"},
		{"missing metric", with("--metric", ""), "--metric: is required"},
		{"missing window", with("--window", ""), "--window: is required"},
		{"window name", with("--window", "hourly"), "--window: want kind:size or a duration"},
		{"zero bare window", with("--window", "0s"), "--window:"},
		{"bad window kind", with("--window", "weekly:1m"), "--window: unknown window kind"},
		{"bad window size", with("--window", "tumbling:soon"), "--window: bad duration"},
		{"zero window", with("--window", "tumbling:0s"), "--window:"},
		{"missing from", with("--from", ""), "--from: is required"},
		{"bad from", with("--from", "yesterday"), "--from: \"yesterday\" is neither RFC 3339"},
		{"from too old", with("--from", "1999-01-01T00:00:00Z"), "--from:"},
		{"to before from", with("--to", "2026-11-30T00:00:00Z"), "--to: must be after --from"},
		{"bad aggs", with("--aggs", "count,median"), "--aggs: unknown aggregate \"median\""},
		{"repeated group", with("--group-by", "device,device"), "--group-by: dimension \"device\" repeated"},
		{"negative limit", with("--limit", "-1"), "--limit:"},
		{"bad limit", with("--limit", "many"), `"--limit"`},
		{"bad format", with("--format", "xml"), "--format:"},
		{"bad timeout", with("--timeout", "0s"), "--timeout:"},
		{"unknown flag", with("--colour", "red"), "--colour"},
		{"argument", append(with("--format", "json"), "extra"), `unexpected argument "extra"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out, errOut := runQueryCmd(c.args...)
			if code != 2 || !strings.Contains(errOut, c.want) || out != "" {
				t.Fatalf("exit %d, stderr %q, stdout %q: want 2 and %q", code, errOut, out, c.want)
			}
		})
	}
	code, out, _ := runQueryCmd("--help")
	if code != 0 || !strings.Contains(out, "Usage: hubd query") || !strings.Contains(out, "--group-by") {
		t.Fatalf("--help: exit %d\n%s", code, out)
	}
}

// TestQueryHubErrors: a hub that is down, or that refuses the request,
// exits 1 naming its URL and quoting its answer; parameters only the hubs
// can judge (the window against their resolution) exit 2 naming the flag.
func TestQueryHubErrors(t *testing.T) {
	up := startQueryHub(t)
	upURL, downURL := "http://"+up.HTTPAddr(), "http://"+freeAddr(t)
	query := func(extra ...string) []string {
		return append([]string{"--metric", "temp", "--window", "tumbling:1m", "--from", "2026-12-01T00:00:00Z",
			"--to", "1796169600000", "--timeout", "10s"}, extra...)
	}
	t.Setenv(queryTokenEnv, "")
	for _, c := range []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"hub down", query("--hub", upURL, "--hub", downURL, "--token", queryTestToken), 1, []string{downURL}},
		{"no token", query("--hub", upURL), 1, []string{upURL, "401", "missing or wrong bearer token"}},
		{"unknown tag", query("--hub", upURL, "--token", queryTestToken, "--group-by", "room"), 1, []string{upURL, "400", "group_by"}},
		{"off resolution", query("--hub", upURL, "--token", queryTestToken, "--window", "tumbling:15s"), 2, []string{"--window: size", "resolution"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out, errOut := runQueryCmd(c.args...)
			if code != c.code || out != "" {
				t.Fatalf("exit %d, stdout %q, stderr %q: want %d", code, out, errOut, c.code)
			}
			for _, w := range c.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr %q does not name %q", errOut, w)
				}
			}
		})
	}
	// No data is an empty answer, not an error.
	t.Setenv(queryTokenEnv, queryTestToken)
	for format, want := range map[string]string{"json": "[]\n", "ndjson": "", "table": "start  end  count  sum  final  revision\n"} {
		code, out, errOut := runQueryCmd(query("--hub", upURL, "--aggs", "sum,count", "--format", format)...)
		if code != 0 || out != want {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want %q", format, code, out, errOut, want)
		}
	}
}

// TestQueryBareWindow: a bare duration is the tumbling window of that size,
// as GET /v1/aggregates reads it.
func TestQueryBareWindow(t *testing.T) {
	for _, s := range []string{"10s", "1m", "1h30m"} {
		got, err := parseQueryWindow(s)
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		want, err := aggregate.ParseWindowSpec("tumbling:" + s)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s: %+v, want %+v", s, got, want)
		}
	}
}
