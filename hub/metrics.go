package hub

import (
	"github.com/prometheus/client_golang/prometheus"

	"edgeflow/hub/batchview"
	"edgeflow/wire"
)

// metrics are the hub's Prometheus series (prefix edgeflow_hub_).
type metrics struct {
	batches        *prometheus.CounterVec // by status: ok, duplicate, rejected, retry_later
	rejected       *prometheus.CounterVec // by reason
	refused        *prometheus.CounterVec // events refused one by one, by reason
	events         prometheus.Counter
	panics         prometheus.Counter
	dropped        *prometheus.CounterVec // messages not handled, by why
	statuses       prometheus.Counter
	commitSeconds  prometheus.Histogram
	groupBatches   prometheus.Histogram
	ackSeconds     prometheus.Histogram
	ackErrors      prometheus.Counter
	ackMessages    prometheus.Counter
	checkpoints    *prometheus.CounterVec // by result
	ckptEncode     prometheus.Histogram   // applier time spent encoding a checkpoint's state
	walDeleted     prometheus.Counter
	consumerPanics prometheus.Counter
	streams        prometheus.Gauge   // streams the committer holds dedup state of
	streamsRetired prometheus.Counter // streams retired after their idle expiry
}

// newMetrics creates and registers the hub's metrics; devices reports the
// registry's device counts for the gauges.
func newMetrics(reg prometheus.Registerer, devices func() (all, online int)) (*metrics, error) {
	f := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: "edgeflow", Subsystem: "hub", Name: name, Help: help}
	}
	m := &metrics{
		batches:  prometheus.NewCounterVec(prometheus.CounterOpts(f("batches_total", "Batches answered, by ack status.")), []string{"status"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts(f("rejected_batches_total", "Batches rejected, by reason.")), []string{"reason"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts(f("refused_events_total",
			"Events the hub refused one by one while it applied the rest of their batch (recorded as gaps \"refused:<reason>\"), by reason.")), []string{"reason"}),
		events:        prometheus.NewCounter(prometheus.CounterOpts(f("events_applied_total", "Events applied (new sequence numbers only)."))),
		panics:        prometheus.NewCounter(prometheus.CounterOpts(f("recovered_panics_total", "Panics recovered while handling a message."))),
		dropped:       prometheus.NewCounterVec(prometheus.CounterOpts(f("dropped_messages_total", "Messages not handled, by why.")), []string{"why"}),
		statuses:      prometheus.NewCounter(prometheus.CounterOpts(f("status_messages_total", "Device status messages logged."))),
		commitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "edgeflow", Subsystem: "hub", Name: "wal_commit_seconds", Help: "Time to write and sync one log group.", Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16)}),
		groupBatches:  prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "edgeflow", Subsystem: "hub", Name: "wal_group_entries", Help: "Log entries per group commit.", Buckets: prometheus.ExponentialBuckets(1, 2, 11)}),
		ackSeconds:    prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "edgeflow", Subsystem: "hub", Name: "ack_seconds", Help: "Time from a batch's arrival at the hub to its ack handed to the broker (the hub's share of an agent's event-to-ack latency).", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}),
		ackErrors:     prometheus.NewCounter(prometheus.CounterOpts(f("ack_publish_errors_total", "Acks that could not be published."))),
		ackMessages:   prometheus.NewCounter(prometheus.CounterOpts(f("ack_messages_total", "Ack messages handed to the broker; one may answer a run of an agent's batches (range_acks), so batches_total over this is the batches an ack answers."))),
		checkpoints:   prometheus.NewCounterVec(prometheus.CounterOpts(f("checkpoints_total", "Checkpoints written, by result.")), []string{"result"}),
		ckptEncode: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "edgeflow", Subsystem: "hub", Name: "checkpoint_encode_seconds",
			Help:    "Time the applier spends encoding the state for a checkpoint. Nothing is applied meanwhile, and once the apply queue is full nothing is committed or acked either.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}),
		walDeleted:     prometheus.NewCounter(prometheus.CounterOpts(f("wal_deleted_entries_total", "Log entries deleted by retention."))),
		consumerPanics: prometheus.NewCounter(prometheus.CounterOpts(f("consumer_panics_total", "Panics recovered in a Consumer's Apply."))),
		streams:        prometheus.NewGauge(prometheus.GaugeOpts(f("streams", "Streams (device, stream id) the hub keeps dedup state of; each device holds at most max-streams-per-device."))),
		streamsRetired: prometheus.NewCounter(prometheus.CounterOpts(f("streams_retired_total", "Streams retired after stream-idle-expiry without a batch."))),
	}
	for _, r := range batchview.AllReasons {
		m.rejected.WithLabelValues(string(r))
	}
	for f := wire.FaultValue; f <= wire.FaultTime; f++ {
		m.refused.WithLabelValues(f.Reason())
	}
	for _, s := range []string{"ok", "duplicate", "rejected", "retry_later"} {
		m.batches.WithLabelValues(s)
	}
	cs := []prometheus.Collector{m.batches, m.rejected, m.refused, m.events, m.panics, m.dropped, m.statuses, m.commitSeconds,
		m.groupBatches, m.ackSeconds, m.ackErrors, m.ackMessages, m.checkpoints, m.ckptEncode, m.walDeleted, m.consumerPanics,
		m.streams, m.streamsRetired,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts(f("devices", "Devices known to the hub.")), func() float64 { n, _ := devices(); return float64(n) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts(f("devices_online", "Devices whose last status said online.")), func() float64 { _, n := devices(); return float64(n) }),
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
