package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"edgeflow/aggregate"
	"edgeflow/hub/hubapi"
)

// queryGate bounds the expensive queries (GET /v1/aggregates, /v1/events,
// /v1/partials) that run at once, so that a burst of them cannot take
// every CPU and gigabytes of heap from ingest and from /metrics. A query
// waits at most Options.HTTPQueryWait for a slot, then is answered 429
// with Retry-After. Probes, /metrics and device lookups never pass here.
type queryGate struct {
	slots   chan struct{}
	wait    time.Duration
	budget  time.Duration // one query's time: its context's deadline
	running prometheus.Gauge
	busy    *prometheus.CounterVec // 429s, by endpoint
	refused *prometheus.CounterVec // 400s at a cap, by endpoint, limit and when
	stopped *prometheus.CounterVec // queries stopped, by endpoint and why
}

// Labels of edgeflow_hub_http_queries_refused_total{when}.
const (
	// refusedBefore: the query's cost made the cap certain, so it was
	// refused before it read or built anything.
	refusedBefore = "before"
	// refusedDuring: the query hit the cap while it ran.
	refusedDuring = "during"
)

// maxQueries bounds Options.HTTPMaxQueries: each running query may
// hold up to max_query_results windows.
const maxQueries = 1024

// gatedEndpoints are the paths that take a query slot.
var gatedEndpoints = []string{"/v1/aggregates", "/v1/events", "/v1/partials"}

// newQueryGate creates the gate and registers its metrics.
func newQueryGate(o Config, reg prometheus.Registerer) (*queryGate, error) {
	f := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: "edgeflow", Subsystem: "hub", Name: name, Help: help}
	}
	g := &queryGate{
		slots:  make(chan struct{}, o.MaxQueries),
		wait:   o.QueryWait,
		budget: o.QueryTimeout,
		running: prometheus.NewGauge(prometheus.GaugeOpts(f("http_queries_running",
			"Expensive queries (aggregates, events, partials) running now; at most http-max-queries."))),
		busy: prometheus.NewCounterVec(prometheus.CounterOpts(f("http_queries_busy_total",
			"Queries answered 429 because http-max-queries were running for longer than http-query-wait, by endpoint.")), []string{"endpoint"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts(f("http_queries_refused_total",
			"Queries answered 400 at a cap (max_query_results, max_query_partials), by endpoint, cap, and when: before (the cost made it certain; nothing was computed) or during.")),
			[]string{"endpoint", "limit", "when"}),
		stopped: prometheus.NewCounterVec(prometheus.CounterOpts(f("http_queries_stopped_total",
			"Queries stopped before their answer, by endpoint and why: client_gone, or deadline (longer than http-query-timeout).")), []string{"endpoint", "why"}),
	}
	for _, ep := range gatedEndpoints {
		g.busy.WithLabelValues(ep)
		for _, when := range []string{refusedBefore, refusedDuring} {
			g.refused.WithLabelValues(ep, "max_query_results", when)
		}
	}
	for _, c := range []prometheus.Collector{g.running, g.busy, g.refused, g.stopped} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// acquire takes a slot, waiting at most g.wait (or until ctx is done).
func (g *queryGate) acquire(ctx context.Context) bool {
	select {
	case g.slots <- struct{}{}:
		return true
	default:
	}
	t := time.NewTimer(g.wait)
	defer t.Stop()
	select {
	case g.slots <- struct{}{}:
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}

// release frees the slot acquire took.
func (g *queryGate) release() { <-g.slots }

// retryAfter is the Retry-After of a 429, in whole seconds (at least 1).
func (g *queryGate) retryAfter() string {
	return strconv.Itoa(max(1, int((g.wait+time.Second-1)/time.Second)))
}

// gated runs h in a query slot, with the request's context bounded by
// the query budget; past the wait it answers 429 with Retry-After.
func (s *API) gated(h http.HandlerFunc) http.HandlerFunc {
	g := s.gate
	return func(w http.ResponseWriter, r *http.Request) {
		if !g.acquire(r.Context()) {
			if r.Context().Err() != nil {
				g.stopped.WithLabelValues(r.URL.Path, "client_gone").Inc()
				return
			}
			g.busy.WithLabelValues(r.URL.Path).Inc()
			w.Header().Set("Retry-After", g.retryAfter())
			writeJSON(w, http.StatusTooManyRequests, hubapi.APIError{
				Error: fmt.Sprintf("busy: %d queries are running (http-max-queries) and none ended within %v (http-query-wait); retry later", cap(g.slots), g.wait),
				Limit: "http-max-queries", Max: cap(g.slots)})
			return
		}
		g.running.Inc()
		defer func() { g.running.Dec(); g.release() }()
		ctx, cancel := context.WithTimeout(r.Context(), g.budget)
		defer cancel()
		h(w, r.WithContext(ctx))
	}
}

// writeQueryError answers the error of a gated query: as writeAPIError,
// and counted; explain, when set, rewrites a *LimitError for the client
// once it is counted. A query stopped by its deadline is a 503; one whose
// client went away gets no answer.
func (s *API) writeQueryError(w http.ResponseWriter, r *http.Request, err error, explain func(*aggregate.LimitError) error) {
	g := s.gate
	var le *aggregate.LimitError
	switch {
	case errors.As(err, &le):
		when := refusedDuring
		if le.Estimated {
			when = refusedBefore
		}
		g.refused.WithLabelValues(r.URL.Path, le.Limit, when).Inc()
		if explain != nil {
			err = explain(le)
		}
	case errors.Is(err, context.DeadlineExceeded):
		g.stopped.WithLabelValues(r.URL.Path, "deadline").Inc()
		writeJSON(w, http.StatusServiceUnavailable, hubapi.APIError{Error: fmt.Sprintf("the query ran longer than %v (http-query-timeout): narrow from/to, window or group_by", g.budget)})
		return
	case errors.Is(err, context.Canceled):
		g.stopped.WithLabelValues(r.URL.Path, "client_gone").Inc()
		return
	case errors.Is(err, errBusy): // a fan-out's own work found no slot
		g.busy.WithLabelValues(r.URL.Path).Inc()
		w.Header().Set("Retry-After", g.retryAfter())
		writeJSON(w, http.StatusTooManyRequests, hubapi.APIError{Error: err.Error(), Limit: "http-max-queries", Max: cap(g.slots)})
		return
	}
	writeAPIError(w, err)
}
