package clocksync

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are a Clock's Prometheus instruments. The gauges are computed at
// scrape time, so the uncertainty a scrape sees is the widened one.
type metrics struct {
	samples *prometheus.CounterVec // source, result
	rounds  *prometheus.CounterVec // result
	steps   *prometheus.CounterVec // kind
	// stateWrites counts writes of the state file by result (ok, error).
	stateWrites *prometheus.CounterVec
}

func newMetrics(c *Clock, reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		samples: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "edgeflow", Subsystem: "clocksync", Name: "samples_total",
			Help: "Time samples by source kind (ntp, hub) and result (ok, error, invalid, kiss, too_far, falseticker).",
		}, []string{"source", "result"}),
		rounds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "edgeflow", Subsystem: "clocksync", Name: "rounds_total",
			Help: "Polling rounds by result (accepted, no_source, rejected, suspect, source_step).",
		}, []string{"result"}),
		steps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "edgeflow", Subsystem: "clocksync", Name: "steps_total",
			Help: "Detected clock steps by kind: wall (the device clock was set) or source (the time source jumped).",
		}, []string{"kind"}),
		stateWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "edgeflow", Subsystem: "clocksync", Name: "state_writes_total",
			Help: "Writes of the saved clock state (Options.StatePath) by result (ok, error).",
		}, []string{"result"}),
	}
	if reg == nil {
		return m, nil
	}
	gauge := func(name, help string, f func(Estimate) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "edgeflow", Subsystem: "clocksync", Name: name, Help: help,
		}, func() float64 { return f(c.Estimate()) })
	}
	cs := []prometheus.Collector{
		m.samples, m.rounds, m.steps, m.stateWrites,
		gauge("offset_seconds", "Estimated true time minus device wall clock.", func(e Estimate) float64 { return e.Offset.Seconds() }),
		gauge("uncertainty_seconds", "Half-width of the interval that holds the true offset; grows while no sample arrives.", func(e Estimate) float64 { return e.Uncertainty.Seconds() }),
		gauge("drift_ppm", "Estimated drift of the offset, parts per million.", func(e Estimate) float64 { return e.Drift }),
		gauge("trusted", "1 if the clock is trusted (an estimate within MaxUncertainty), else 0.", func(e Estimate) float64 {
			if e.Trusted() {
				return 1
			}
			return 0
		}),
	}
	for _, col := range cs {
		if err := reg.Register(col); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, fmt.Errorf("clocksync: metrics already registered (one Clock per registerer, or wrap it with prometheus.WrapRegistererWith): %w", err)
			}
			return nil, fmt.Errorf("clocksync: register metrics: %w", err)
		}
	}
	return m, nil
}
