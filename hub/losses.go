package hub

import (
	"github.com/prometheus/client_golang/prometheus"
)

// damageMetrics count what recovery found damaged (prefix edgeflow_hub_).
type damageMetrics struct {
	fallbacks  *prometheus.CounterVec // by to: previous, log
	damaged    prometheus.Counter
	lostEvents prometheus.Gauge
}

func newDamageMetrics(reg prometheus.Registerer) (*damageMetrics, error) {
	m := &damageMetrics{
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "edgeflow", Subsystem: "hub", Name: "checkpoint_fallbacks_total",
			Help: "Damaged checkpoints passed over at start, by what recovery used instead: previous (the checkpoint before it) or log (a replay of the whole log)."}, []string{"to"}),
		damaged: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "edgeflow", Subsystem: "hub", Name: "store_damaged_entries_total",
			Help: "Log positions found unreadable or missing at start and skipped (recover-damaged); the loss is recorded."}),
		lostEvents: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "edgeflow", Subsystem: "hub", Name: "store_lost_events",
			Help: "Events of known streams recorded as lost to store damage (gap reason store_damaged), over the store's life."}),
	}
	m.fallbacks.WithLabelValues("previous")
	m.fallbacks.WithLabelValues("log")
	for _, c := range []prometheus.Collector{m.fallbacks, m.damaged, m.lostEvents} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
