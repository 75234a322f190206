package lease

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the lease series of one manager.
type metrics struct {
	owned         prometheus.Gauge
	rebalances    prometheus.Counter
	renewFailures prometheus.Counter
	kvErrors      prometheus.Counter
	takeover      prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "edgeflow", Subsystem: "hub", Name: name, Help: help})
	}
	m := &metrics{
		owned: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "edgeflow", Subsystem: "hub", Name: "partitions_owned",
			Help: "Cluster mode: partitions this hub holds a valid lease on."}),
		rebalances:    c("partition_rebalances_total", "Cluster mode: partitions this hub released cleanly (after Handoff) because the assignment moved them or the hub stopped."),
		renewFailures: c("lease_renew_failures_total", "Cluster mode: lease renewals that failed for a reason other than the lease having changed."),
		kvErrors:      c("lease_kv_errors_total", "Cluster mode: errors talking to the lease KV bucket (renewals, heartbeats, acquisitions, releases)."),
		takeover: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "edgeflow", Subsystem: "hub", Name: "partition_takeover_seconds",
			Help:    "Cluster mode: for each partition this hub acquired that another hub held, seconds from the previous owner's last renewal or release to the acquisition (server timestamps).",
			Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 8, 13, 30}}),
	}
	if reg == nil {
		return m, nil
	}
	for _, col := range []prometheus.Collector{m.owned, m.rebalances, m.renewFailures, m.kvErrors, m.takeover} {
		if err := reg.Register(col); err != nil {
			return nil, fmt.Errorf("lease: register metrics: %w", err)
		}
	}
	return m, nil
}
