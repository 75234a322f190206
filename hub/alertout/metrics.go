package alertout

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the alert outputs' Prometheus metrics, labelled by output
// name. A nil *Metrics records nothing.
type Metrics struct {
	deliveredC, failedC, retriesC *prometheus.CounterVec
	pendingG, positionG           *prometheus.GaugeVec
}

// NewMetrics registers the outputs' metrics with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		deliveredC: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edgeflow_alert_output_delivered_total",
			Help: "Alert changes the output's receiver took (a webhook's 2xx, a publish the broker took)."}, []string{"output"}),
		failedC: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edgeflow_alert_output_failed_total",
			Help: "Alert changes the receiver refused for good (a webhook's 4xx other than 408 and 429): logged and skipped."}, []string{"output"}),
		retriesC: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edgeflow_alert_output_retries_total",
			Help: "Failed delivery attempts the output retries (receiver down, 5xx, 408, 429, timeout)."}, []string{"output"}),
		pendingG: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "edgeflow_alert_output_pending",
			Help: "Alert changes the hub holds that the output has not delivered yet."}, []string{"output"}),
		positionG: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "edgeflow_alert_output_position",
			Help: "The alert change sequence the output delivered up to (stored in the hub's store)."}, []string{"output"}),
	}
	for _, c := range []prometheus.Collector{m.deliveredC, m.failedC, m.retriesC, m.pendingG, m.positionG} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) delivered(name string) {
	if m != nil {
		m.deliveredC.WithLabelValues(name).Inc()
	}
}

func (m *Metrics) failed(name string) {
	if m != nil {
		m.failedC.WithLabelValues(name).Inc()
	}
}

func (m *Metrics) retried(name string) {
	if m != nil {
		m.retriesC.WithLabelValues(name).Inc()
	}
}

func (m *Metrics) pending(name string, n uint64) {
	if m != nil {
		m.pendingG.WithLabelValues(name).Set(float64(n))
	}
}

func (m *Metrics) position(name string, pos uint64) {
	if m != nil {
		m.positionG.WithLabelValues(name).Set(float64(pos))
	}
}
