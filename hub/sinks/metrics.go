package sinks

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the sinks' Prometheus metrics, labelled by sink name. A nil
// *Metrics records nothing.
type Metrics struct {
	rows     *prometheus.CounterVec
	errors   *prometheus.CounterVec
	lag      *prometheus.GaugeVec
	lagBytes *prometheus.GaugeVec
	lagSecs  *prometheus.GaugeVec
	position *prometheus.GaugeVec
	broken   *prometheus.GaugeVec
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
		lagBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "edgeflow_sink_lag_bytes",
			Help: "Stored size of the log entries the hub applied that the sink has not yet committed to its target."}, []string{"sink"}),
		lagSecs: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "edgeflow_sink_lag_seconds",
			Help: "Event time the sink's target is behind: the newest corrected event time applied minus the newest at the sink's position."}, []string{"sink"}),
		position: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "edgeflow_sink_position",
			Help: "The log position the sink committed to its target with its rows."}, []string{"sink"}),
		broken: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "edgeflow_sink_broken",
			Help: "1 when the sink stopped at a gap: retention deleted log entries it had not written (more than sink-max-lag behind); GET /v1/sinks says which."}, []string{"sink"}),
	}
	for _, c := range []prometheus.Collector{m.rows, m.errors, m.lag, m.lagBytes, m.lagSecs, m.position, m.broken} {
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

func (m *Metrics) lagSet(sink string, applied, pos, bytes uint64, secs float64) {
	if m == nil {
		return
	}
	m.position.WithLabelValues(sink).Set(float64(pos))
	if applied >= pos {
		m.lag.WithLabelValues(sink).Set(float64(applied - pos))
	}
	m.lagBytes.WithLabelValues(sink).Set(float64(bytes))
	m.lagSecs.WithLabelValues(sink).Set(secs)
}

// brokenSet sets the sink's broken gauge (created at 0 with the sink, so
// an alert on it sees every sink).
func (m *Metrics) brokenSet(sink string, broken bool) {
	if m == nil {
		return
	}
	v := 0.0
	if broken {
		v = 1
	}
	m.broken.WithLabelValues(sink).Set(v)
}
