package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"edgeflow/aggregate"
	"edgeflow/hub/hubapi"
	"edgeflow/hub/internal/hubtest"
)

// TestQueryGate: with every query slot taken, /v1/aggregates, /v1/events
// and /v1/partials answer 429 with Retry-After and a JSON error naming
// http-max-queries, counted by endpoint, while /metrics, /healthz, /readyz
// and /v1/devices/{id} answer as usual; once the slot is free the query
// answers. A query over max_query_results is refused before any work and
// counted as such; one past its deadline is stopped with a 503.
func TestQueryGate(t *testing.T) {
	a, base, small := gateAPI(t)
	h := a.Handler()
	a.gate.slots <- struct{}{} // every slot taken
	gatedPaths := map[string]string{
		"/v1/aggregates": small,
		"/v1/events":     "/v1/events?device=gate-1&from=" + base.Format(time.RFC3339) + "&to=" + base.Add(time.Hour).Format(time.RFC3339),
		"/v1/partials":   "/v1/partials?metric=temp&from=" + base.Format(time.RFC3339) + "&to=" + base.Add(time.Hour).Format(time.RFC3339),
	}
	for ep, path := range gatedPaths {
		rec := serve(h, path)
		var e hubapi.APIError
		if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "1" ||
			json.Unmarshal(rec.Body.Bytes(), &e) != nil || e.Limit != "http-max-queries" || e.Max != 1 || !strings.Contains(e.Error, "busy") {
			t.Fatalf("%s with every slot taken: %d Retry-After %q %s", ep, rec.Code, rec.Header().Get("Retry-After"), rec.Body)
		}
		if n := counterValue(t, a.gate.busy.WithLabelValues(ep)); n != 1 {
			t.Fatalf("%s: busy counter %v, want 1", ep, n)
		}
	}
	for _, path := range []string{"/metrics", "/healthz", "/readyz", "/v1/devices/gate-1"} {
		if rec := serve(h, path); rec.Code != 200 {
			t.Fatalf("%s while queries are busy: %d %s", path, rec.Code, rec.Body)
		}
	}
	if body := serve(h, "/metrics").Body.String(); !strings.Contains(body, `edgeflow_hub_http_queries_busy_total{endpoint="/v1/aggregates"} 1`) {
		t.Fatal("/metrics lacks the busy counter")
	}
	a.gate.release()
	for ep, path := range gatedPaths {
		if rec := serve(h, path); rec.Code != 200 {
			t.Fatalf("%s with a free slot: %d %s", ep, rec.Code, rec.Body)
		}
	}

	over := aggPath("temp", "tumbling:1m", base, base.Add(time.Hour))
	rec := serve(h, over)
	var e hubapi.APIError
	if rec.Code != 400 || json.Unmarshal(rec.Body.Bytes(), &e) != nil || e.Limit != "max_query_results" || e.Max != 5 {
		t.Fatalf("over the cap: %d %s", rec.Code, rec.Body)
	}
	if n := counterValue(t, a.gate.refused.WithLabelValues("/v1/aggregates", "max_query_results", refusedBefore)); n != 1 {
		t.Fatalf("refused before: %v, want 1", n)
	}
	if n := counterValue(t, a.gate.refused.WithLabelValues("/v1/aggregates", "max_query_results", refusedDuring)); n != 0 {
		t.Fatalf("refused during: %v, want 0", n)
	}

	a.gate.budget = time.Nanosecond // every query past its deadline
	rec = serve(h, small)
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "http-query-timeout") {
		t.Fatalf("past the deadline: %d %s", rec.Code, rec.Body)
	}
	if n := counterValue(t, a.gate.stopped.WithLabelValues("/v1/aggregates", "deadline")); n != 1 {
		t.Fatalf("stopped by the deadline: %v, want 1", n)
	}
}

// TestFetchPartialsRetriesBusyHub: hubd query's fetch from a hub whose
// query slots are taken is answered 429 and asks again after Retry-After,
// getting the set once a slot is free.
func TestFetchPartialsRetriesBusyHub(t *testing.T) {
	a, base, _ := gateAPI(t)
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close)
	a.gate.slots <- struct{}{} // every slot taken
	type result struct {
		ps  *aggregate.PartialSet
		err error
	}
	got := make(chan result, 1)
	go func() {
		q := aggregate.Query{Metric: "temp", GroupBy: []string{"device"}}
		ps, err := hubapi.FetchPartials(context.Background(), http.DefaultClient, srv.URL, "", q, base, base.Add(time.Hour))
		got <- result{ps, err}
	}()
	for counterValue(t, a.gate.busy.WithLabelValues("/v1/partials")) == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	a.gate.release()
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	res, err := aggregate.QueryPartials([]*aggregate.PartialSet{r.ps}, aggregate.Query{Metric: "temp",
		Window: aggregate.WindowSpec{Kind: aggregate.Tumbling, Size: time.Minute}, From: base, To: base.Add(time.Hour)})
	if err != nil || len(res) != 20 {
		t.Fatalf("%d windows, %v", len(res), err)
	}
}

// gateAPI returns an API with one query slot over an engine that answers
// at most 5 results a query and holds 20 minutes of one event a minute of
// device gate-1 from base; small is a query of its first 3 minutes.
func gateAPI(t *testing.T) (a *API, base time.Time, small string) {
	eng, err := aggregate.New(aggregate.Options{IdleTimeout: 2 * time.Second, EvictAfter: 24 * time.Hour,
		WatermarkInterval: time.Nanosecond, TagKeys: []string{"room"}, MaxQueryResults: 5,
		Windows: []aggregate.WindowConfig{{Name: "1m", Kind: "tumbling", Size: time.Minute}}})
	if err != nil {
		t.Fatal(err)
	}
	base = time.Now().Add(-time.Hour).Truncate(time.Minute)
	b := aggregate.Batch{Seq: 1, Device: "gate-1", ServerTime: time.Now().UnixNano()}
	for i := range 20 {
		b.Events = append(b.Events, aggregate.Event{Seq: uint64(i + 1), Metric: "temp", Value: float64(i), Time: base.Add(time.Duration(i) * time.Minute).UnixNano()})
	}
	if err := eng.Apply(&b); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	a, err = New(gateBackend{done: make(chan struct{})}, Config{Engine: eng, Gatherer: reg, Registerer: reg, Logger: hubtest.QuietLogger(t),
		StreamHeartbeat: time.Second, MaxQueries: 1, QueryWait: 10 * time.Millisecond, QueryTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	small = aggPath("temp", "tumbling:1m", base, base.Add(3*time.Minute))
	var r hubapi.AggregatesResponse
	if rec := serve(a.Handler(), small); rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &r) != nil || len(r.Windows) != 3 {
		t.Fatalf("the engine's first 3 minutes: %d %s", rec.Code, rec.Body)
	}
	return a, base, small
}

// gateBackend is the hub as the gate's tests need it: recovered and
// ready, with device gate-1 and no stored events (the gate, not the log,
// is what they test).
type gateBackend struct{ done chan struct{} }

func (gateBackend) Ready() bool     { return true }
func (gateBackend) Recovered() bool { return true }
func (gateBackend) DevicesPage(string, int) ([]hubapi.DeviceInfo, string) {
	return []hubapi.DeviceInfo{{ID: "gate-1"}}, ""
}
func (gateBackend) Device(id string) (hubapi.DeviceInfo, bool) {
	return hubapi.DeviceInfo{ID: id}, id == "gate-1"
}
func (gateBackend) StoredEvents(context.Context, EventsQuery) (*hubapi.EventsResponse, error) {
	return &hubapi.EventsResponse{}, nil
}
func (b gateBackend) Done() <-chan struct{} { return b.done }

// aggPath is a GET /v1/aggregates of metric over [from, to).
func aggPath(metric, window string, from, to time.Time) string {
	return fmt.Sprintf("/v1/aggregates?metric=%s&window=%s&from=%d&to=%s", metric, url.QueryEscape(window),
		from.UnixMilli(), url.QueryEscape(to.Format(time.RFC3339)))
}

func serve(h http.Handler, path string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	return rec
}

// counterValue reads a counter.
func counterValue(t testing.TB, c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
