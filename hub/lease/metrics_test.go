package lease

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestMetricsRegisteredAgain: Open tried again after a failure registers
// its metrics again; the second registration takes over the first one's
// collectors (their counts go on) instead of failing.
func TestMetricsRegisteredAgain(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, err := newMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	a.kvErrors.Inc()
	b, err := newMetrics(reg)
	if err != nil {
		t.Fatalf("second registration: %v", err)
	}
	if b.owned != a.owned || b.rebalances != a.rebalances || b.renewFailures != a.renewFailures || b.kvErrors != a.kvErrors || b.takeover != a.takeover {
		t.Error("the second registration has collectors of its own")
	}
	if n, err := reg.Gather(); err != nil || len(n) != 5 {
		t.Errorf("gathered %d families (%v), want 5", len(n), err)
	}
}
