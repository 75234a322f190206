package agent

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the agent's own counters (the buffer, uplink and clock
// register theirs). They are atomics, read by /v1/status and by
// Prometheus through counter functions; 64-bit atomic types keep them
// aligned on 32-bit ARM.
type metrics struct {
	httpEvents, httpRequests, httpRejected atomic.Uint64
	udpEvents, udpBadLines, udpSkipped     atomic.Uint64
	udpAppendErrors                        atomic.Uint64
	repaired, sentUntrusted                atomic.Uint64
}

func (m *metrics) register(reg prometheus.Registerer) error {
	if reg == nil {
		return nil
	}
	counter := func(name, help string, v *atomic.Uint64, labels prometheus.Labels) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "edgeflow", Subsystem: "agent", Name: name, Help: help, ConstLabels: labels,
		}, func() float64 { return float64(v.Load()) })
	}
	cs := []prometheus.Collector{
		counter("ingested_events_total", "Events taken into the buffer, by source.", &m.httpEvents, prometheus.Labels{"source": "http"}),
		counter("ingested_events_total", "Events taken into the buffer, by source.", &m.udpEvents, prometheus.Labels{"source": "udp"}),
		counter("http_requests_total", "POST /v1/events requests.", &m.httpRequests, nil),
		counter("http_rejected_requests_total", "POST /v1/events requests refused (bad event, too large, buffer full).", &m.httpRejected, nil),
		counter("udp_bad_lines_total", "Line-protocol lines that could not be parsed.", &m.udpBadLines, nil),
		counter("udp_skipped_fields_total", "String fields of line-protocol lines, which are not stored.", &m.udpSkipped, nil),
		counter("udp_append_errors_total", "UDP datagrams whose events the buffer refused.", &m.udpAppendErrors, nil),
		counter("repaired_events_total", "Events captured untrusted and re-timed at send.", &m.repaired, nil),
		counter("untrusted_sent_events_total", "Events sent untrusted because they could not be repaired.", &m.sentUntrusted, nil),
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
