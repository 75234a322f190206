package aggregate

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestCollectorDoesNotWaitBehindQueries: while a query holds the engine
// and Apply waits for it, a scrape answers at once with the previous
// values, counted as stale, instead of waiting behind both.
func TestCollectorDoesNotWaitBehindQueries(t *testing.T) {
	e := newEngine(t, testOptions())
	reg := prometheus.NewRegistry()
	reg.MustRegister(e.Collector("edgeflow_aggregate"))
	mustApply(t, e, batchOf("a", 1, at(time.Minute), ev{seq: 1, metric: "m", v: 1, t: at(time.Second)}))
	if v, err := gathered(reg); err != nil || v["edgeflow_aggregate_events_total"] != 1 {
		t.Fatalf("metrics %v %v", v, err)
	}

	e.mu.RLock() // a long query
	applied := make(chan struct{})
	go func() {
		defer close(applied)
		mustApply(t, e, batchOf("a", 1, at(time.Minute), ev{seq: 2, metric: "m", v: 2, t: at(2 * time.Second)}))
	}()
	for e.mu.TryRLock() { // until Apply waits for the lock
		e.mu.RUnlock()
		time.Sleep(time.Millisecond)
	}
	scraped := make(chan error, 1)
	go func() {
		v, err := gathered(reg)
		if err == nil && (v["edgeflow_aggregate_events_total"] != 1 || v["edgeflow_aggregate_stale_scrapes_total"] != 1) {
			err = fmt.Errorf("during the query: %v", v)
		}
		scraped <- err
	}()
	select {
	case err := <-scraped:
		if err != nil {
			t.Error(err)
		}
	case <-time.After(30 * time.Second): // a bound, not a measurement
		t.Error("a scrape waited behind a query and a waiting Apply")
	}
	e.mu.RUnlock()
	<-applied
	if s := e.Stats(); s.Events != 2 {
		t.Fatalf("events %d after the query", s.Events)
	}
}

// gathered returns the value of every unlabelled counter and gauge.
func gathered(reg *prometheus.Registry) (map[string]float64, error) {
	mfs, err := reg.Gather()
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			out[mf.GetName()] = m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return out, nil
}
