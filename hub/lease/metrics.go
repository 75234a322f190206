package lease

import (
	"errors"
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
	// A collector already registered (Open tried again after a failure)
	// is taken over, so its counts go on.
	var err error
	if m.owned, err = register(reg, m.owned); err != nil {
		return nil, err
	}
	if m.rebalances, err = register(reg, m.rebalances); err != nil {
		return nil, err
	}
	if m.renewFailures, err = register(reg, m.renewFailures); err != nil {
		return nil, err
	}
	if m.kvErrors, err = register(reg, m.kvErrors); err != nil {
		return nil, err
	}
	if m.takeover, err = register(reg, m.takeover); err != nil {
		return nil, err
	}
	return m, nil
}

// register registers col, or returns the equal collector already
// registered.
func register[C prometheus.Collector](reg prometheus.Registerer, col C) (C, error) {
	err := reg.Register(col)
	if are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	if err != nil {
		return col, fmt.Errorf("lease: register metrics: %w", err)
	}
	return col, nil
}
