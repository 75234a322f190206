package sinks

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the sinks' Prometheus metrics, labelled by sink name. A nil
// *Metrics records nothing.
type Metrics struct {
	rows     *prometheus.CounterVec
	errors   *prometheus.CounterVec
	lag      *prometheus.GaugeVec
	position *prometheus.GaugeVec
}

// NewMetrics registers the sinks' metrics with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		rows: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edgeflow_sink_rows_written_total",
			Help: "Rows the sink's target inserted or updated (an upsert that changed nothing does not count)."}, []string{"sink"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edgeflow_sink_errors_total",
			Help: "Failed sink steps (kind=step; the sink retries from its stored position) and gaps (kind=gap: log entries deleted before the sink read them)."}, []string{"sink", "kind"}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "edgeflow_sink_lag_entries",
			Help: "Log entries the hub applied that the sink has not yet committed to its target."}, []string{"sink"}),
		position: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "edgeflow_sink_position",
			Help: "The log position the sink committed to its target with its rows."}, []string{"sink"}),
	}
	for _, c := range []prometheus.Collector{m.rows, m.errors, m.lag, m.position} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) written(sink string, n int64) {
	if m != nil && n > 0 {
		m.rows.WithLabelValues(sink).Add(float64(n))
	}
}

func (m *Metrics) errorInc(sink, kind string) {
	if m != nil {
		m.errors.WithLabelValues(sink, kind).Inc()
	}
}

func (m *Metrics) lagSet(sink string, applied, pos uint64) {
	if m == nil {
		return
	}
	m.position.WithLabelValues(sink).Set(float64(pos))
	if applied >= pos {
		m.lag.WithLabelValues(sink).Set(float64(applied - pos))
	}
}
