package uplink

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// maxReasonLabels bounds the distinct rejection reasons counted by label;
// further ones count as "other", so a hub with free-text reasons cannot
// blow up the series count.
const maxReasonLabels = 32

// Metrics are an Uplink's Prometheus series. One Metrics may be shared by
// many Uplinks (a fleet simulator): counters sum, the gauges count
// connected uplinks and batches in flight across all of them.
type Metrics struct {
	BatchesPublished prometheus.Counter
	EventsPublished  prometheus.Counter
	BatchesAsStored  prometheus.Counter
	BytesSent        prometheus.Counter
	BatchesResent    prometheus.Counter
	FastResends      prometheus.Counter
	BatchesAcked     *prometheus.CounterVec // by status: ok, duplicate, rejected, retry_later
	EventsAcked      prometheus.Counter
	Rejected         *prometheus.CounterVec // by reason
	AcksIgnored      *prometheus.CounterVec // by why: malformed, foreign_stream, unmatched, bad_status
	GapEvents        *prometheus.CounterVec // events the hub did not apply, by reason: refused:<reason>, rejected:<reason>
	RetimeErrors     prometheus.Counter
	CodecFallbacks   prometheus.Counter
	InFlight         prometheus.Gauge
	Connected        prometheus.Gauge
	Reconnects       prometheus.Counter
	ConnectFailures  prometheus.Counter
	AckLatency       prometheus.Histogram

	mu      sync.Mutex
	reasons map[string]bool
}

// NewMetrics creates the series and registers them on reg (nil: not
// registered).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "edgeflow", Subsystem: "uplink", Name: name, Help: help})
	}
	m := &Metrics{
		BatchesPublished: c("batches_published_total", "Batches published (first sends)."),
		EventsPublished:  c("events_published_total", "Events published (first sends)."),
		BatchesAsStored:  c("batches_as_stored_total", "Batches read as a block the buffer stores in the wire's columns and sent without encoding their events again (first sends)."),
		BytesSent:        c("bytes_sent_total", "Frame bytes published, resends included."),
		BatchesResent:    c("batches_resent_total", "Batches published again after an ack timeout, a reconnect or a retry_later answer."),
		FastResends:      c("fast_resends_total", "Batches published again before their ack timeout because the hub answered a batch first published after them: lost between the broker and the hub (or answered late). Also counted in batches_resent_total."),
		BatchesAcked: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "edgeflow", Subsystem: "uplink", Name: "batches_acked_total",
			Help: "Batches answered by the hub, by status (ok, duplicate, rejected, retry_later)."}, []string{"status"}),
		EventsAcked: c("events_acked_total", "Events whose batch the hub answered (any status)."),
		Rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "edgeflow", Subsystem: "uplink", Name: "rejected_batches_total",
			Help: "Batches the hub rejected, by reason (first word of the hub's reason)."}, []string{"reason"}),
		GapEvents: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "edgeflow", Subsystem: "uplink", Name: "gap_events_total",
			Help: "Events the hub answered for without applying them, recorded as gaps: refused:<reason> (refused one by one, the rest of the batch applied) or rejected:<reason> (the batch rejected whole; reported to the hub in later batches)."}, []string{"reason"}),
		AcksIgnored: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "edgeflow", Subsystem: "uplink", Name: "acks_ignored_total",
			Help: "Messages on the ack topic that acknowledged nothing, by why."}, []string{"why"}),
		RetimeErrors:    c("retime_errors_total", "Events sent as stored because the Retime hook failed."),
		CodecFallbacks:  c("codec_fallbacks_total", "Columnar batches the hub refused as malformed (a hub older than the codec) and that were sent again as zstd."),
		InFlight:        prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "edgeflow", Subsystem: "uplink", Name: "inflight_batches", Help: "Batches awaiting the hub's ack."}),
		Connected:       prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "edgeflow", Subsystem: "uplink", Name: "connected", Help: "Uplinks connected to the broker (1 for a single agent)."}),
		Reconnects:      c("reconnects_total", "Successful connections after the first."),
		ConnectFailures: c("connect_failures_total", "Failed connection attempts."),
		AckLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "edgeflow", Subsystem: "uplink", Name: "ack_latency_seconds",
			Help: "Time from the last publish of a batch to the hub's ack.", Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 12)}),
		reasons: make(map[string]bool),
	}
	if reg == nil {
		return m, nil
	}
	for _, col := range []prometheus.Collector{m.BatchesPublished, m.EventsPublished, m.BatchesAsStored, m.BytesSent, m.BatchesResent, m.FastResends, m.BatchesAcked,
		m.EventsAcked, m.Rejected, m.GapEvents, m.AcksIgnored, m.RetimeErrors, m.CodecFallbacks, m.InFlight, m.Connected, m.Reconnects, m.ConnectFailures, m.AckLatency} {
		if err := reg.Register(col); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, fmt.Errorf("uplink: register metrics: %w (share one Metrics between Uplinks)", err)
			}
			return nil, fmt.Errorf("uplink: register metrics: %w", err)
		}
	}
	return m, nil
}

// reasonLabel turns a hub's reason text into a bounded label: its first
// word (the hub puts its reason class there), lower case, at most 40 bytes,
// and "other" once maxReasonLabels distinct ones have been seen.
func (m *Metrics) reasonLabel(reason string) string {
	w, _, _ := strings.Cut(strings.TrimSpace(reason), " ")
	w = strings.TrimRight(w, ":;,.")
	w = strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '_', r == '-':
			return r
		case r >= 'A' && r <= 'Z':
			return r + 'a' - 'A'
		}
		return -1
	}, w)
	if len(w) > 40 {
		w = w[:40]
	}
	if w == "" {
		w = "unspecified"
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.reasons[w] {
		if len(m.reasons) >= maxReasonLabels {
			return "other"
		}
		m.reasons[w] = true
	}
	return w
}
