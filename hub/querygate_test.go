package hub

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"edgeflow/aggregate"
	"edgeflow/hub/api"
	"edgeflow/hub/hubapi"
)

// TestQueryGate: with every query slot taken, /v1/aggregates, /v1/events
// and /v1/partials answer 429 with Retry-After and a JSON error naming
// http-max-queries, counted by endpoint, while /metrics, /healthz, /readyz
// and /v1/devices/{id} answer as usual; once the slot is free the query
// answers. A query over max_query_results is refused before any work and
// counted as such; one past its deadline is stopped with a 503.
func TestQueryGate(t *testing.T) {
	s, base, small := gateHub(t)
	h := s.Handler()
	s.api.Gate().Slots <- struct{}{} // every slot taken
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
		if n := counterValue(t, s.api.Gate().Busy.WithLabelValues(ep)); n != 1 {
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
	s.api.Gate().Release()
	for ep, path := range gatedPaths {
		if rec := serve(h, path); rec.Code != 200 {
			t.Fatalf("%s with a free slot: %d %s", ep, rec.Code, rec.Body)
		}
	}

	over := aggPath("temp", "tumbling:1m", base, base.Add(time.Hour), "")
	rec := serve(h, over)
	var e hubapi.APIError
	if rec.Code != 400 || json.Unmarshal(rec.Body.Bytes(), &e) != nil || e.Limit != "max_query_results" || e.Max != 5 {
		t.Fatalf("over the cap: %d %s", rec.Code, rec.Body)
	}
	if n := counterValue(t, s.api.Gate().Refused.WithLabelValues("/v1/aggregates", "max_query_results", api.RefusedBefore)); n != 1 {
		t.Fatalf("refused before: %v, want 1", n)
	}
	if n := counterValue(t, s.api.Gate().Refused.WithLabelValues("/v1/aggregates", "max_query_results", api.RefusedDuring)); n != 0 {
		t.Fatalf("refused during: %v, want 0", n)
	}

	s.api.Gate().Budget = time.Nanosecond // every query past its deadline
	rec = serve(h, small)
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "http-query-timeout") {
		t.Fatalf("past the deadline: %d %s", rec.Code, rec.Body)
	}
	if n := counterValue(t, s.api.Gate().Stopped.WithLabelValues("/v1/aggregates", "deadline")); n != 1 {
		t.Fatalf("stopped by the deadline: %v, want 1", n)
	}
}

// gateHub starts a hub with one query slot, at most 5 results a query,
// and 20 minutes of one event a minute of device gate-1 from base; small
// is a query of its first 3 minutes.
func gateHub(t *testing.T) (s *Server, base time.Time, small string) {
	o := aggTestOptions(t, t.TempDir())
	o.HTTPMaxQueries, o.HTTPQueryWait = 1, 10*time.Millisecond
	o.Aggregate.MaxQueryResults = 5
	o.Aggregate.EvictAfter = 24 * time.Hour // live partials: the floor sees them
	s = startHub(t, o)
	d := newDevice(t, "tcp://"+s.BrokerAddr(), "gate-1")
	base = time.Now().Add(-time.Hour).Truncate(time.Minute)
	times, values := make([]int64, 20), make([]float64, 20)
	for i := range times {
		times[i], values[i] = base.Add(time.Duration(i)*time.Minute).UnixNano(), float64(i)
	}
	d.send(timedBatch("gate-1", d.stream, 1, times, values))
	small = aggPath("temp", "tumbling:1m", base, base.Add(3*time.Minute), "")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var r hubapi.AggregatesResponse
		if code, _ := getJSON(t, s.Handler(), small, &r); code == 200 && len(r.Windows) == 3 {
			return s, base, small
		}
		if time.Now().After(deadline) {
			t.Fatal("the batch did not reach the engine")
		}
	}
}

// TestFetchPartialsRetriesBusyHub: hubd query's fetch from a hub whose
// query slots are taken is answered 429 and asks again after Retry-After,
// getting the set once a slot is free.
func TestFetchPartialsRetriesBusyHub(t *testing.T) {
	s, base, _ := gateHub(t)
	s.api.Gate().Slots <- struct{}{} // every slot taken
	type result struct {
		ps  *aggregate.PartialSet
		err error
	}
	got := make(chan result, 1)
	go func() {
		q := aggregate.Query{Metric: "temp", GroupBy: []string{"device"}}
		ps, err := hubapi.FetchPartials(context.Background(), http.DefaultClient, "http://"+s.HTTPAddr(), "", q, base, base.Add(time.Hour))
		got <- result{ps, err}
	}()
	for counterValue(t, s.api.Gate().Busy.WithLabelValues("/v1/partials")) == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	s.api.Gate().Release()
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

func serve(h http.Handler, path string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	return rec
}
