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
	// refused counts the events ingest refused (an HTTP request's first
	// bad one, or a UDP line), by source and reason (refusalReasons).
	refused [2][len(refusalReasons)]atomic.Uint64
	// unrepairable counts untrusted events whose repaired time the hub
	// would refuse: they are sent untrusted, as stored.
	unrepairable atomic.Uint64
}

// Ingest sources, the first index of metrics.refused.
const (
	sourceHTTP = 0
	sourceUDP  = 1
)

// refusalReasons are the reasons ingest refusals are counted under.
var refusalReasons = [...]string{"malformed", "bad_value", "bad_metric", "bad_tag", "bad_method", "bad_time"}

// countRefused counts one refusal of source for err.
func (m *metrics) countRefused(source int, err error) {
	r := refusalReason(err)
	for i, name := range refusalReasons {
		if name == r {
			m.refused[source][i].Add(1)
			return
		}
	}
	m.refused[source][0].Add(1)
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
		counter("unrepairable_events_total", "Untrusted events whose repaired time the hub would refuse, sent untrusted as stored.", &m.unrepairable, nil),
	}
	for src, name := range [...]string{sourceHTTP: "http", sourceUDP: "udp"} {
		for i, reason := range refusalReasons {
			cs = append(cs, counter("refused_events_total", "Events refused at ingest, before anything was stored, because the hub would refuse them or they did not parse (an HTTP request counts its first bad event), by source and reason.",
				&m.refused[src][i], prometheus.Labels{"source": name, "reason": reason}))
		}
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
