package cluster

import "github.com/prometheus/client_golang/prometheus"

// Metrics are cluster mode's series. The hub registers them in every
// mode (the alert rules name them); they stay zero without NATS.
type Metrics struct {
	Bytes, MaxBytes, Fullness, LastSeq, Up prometheus.Gauge
	Position                               *prometheus.GaugeVec // by partition: last sequence committed here
	CatchUpLag                             *prometheus.GaugeVec // by partition: sequences left to apply of what the stream held at start
	BadMessages, ReadErrors                prometheus.Counter
	AttrEntries                            *prometheus.CounterVec // attribute versions read from the stream, by result
	Snap                                   *SnapshotMetrics
}

// NewMetrics creates cluster mode's metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	g := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "edgeflow", Subsystem: "hub", Name: name, Help: help})
	}
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "edgeflow", Subsystem: "hub", Name: name, Help: help})
	}
	m := &Metrics{
		Bytes:    g("stream_bytes", "Cluster mode: bytes the NATS JetStream log stream holds (polled every few seconds)."),
		MaxBytes: g("stream_max_bytes", "Cluster mode: the stream's byte limit (nats-max-bytes); at it the stream refuses new batches."),
		Fullness: g("stream_fullness_ratio", "Cluster mode: stream_bytes / stream_max_bytes."),
		LastSeq:  g("stream_last_seq", "Cluster mode: the stream's last sequence."),
		Up:       g("stream_up", "Cluster mode: 1 while the last poll of the stream succeeded."),
		Position: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "edgeflow", Subsystem: "hub", Name: "stream_position",
			Help: "Cluster mode: the last stream sequence of each partition committed by this hub."}, []string{"partition"}),
		CatchUpLag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "edgeflow", Subsystem: "hub", Name: "stream_catchup_lag",
			Help: "Cluster mode: per partition, the partition's last stream sequence when the hub started minus the last one it applied (0 once applied; a sequence distance, not a message count)."}, []string{"partition"}),
		BadMessages: c("stream_bad_messages_total", "Cluster mode: stream messages skipped because their subject names no valid device."),
		ReadErrors:  c("stream_read_errors_total", "Cluster mode: failures to open or read a partition's reader (each is retried)."),
		AttrEntries: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "edgeflow", Subsystem: "hub", Name: "stream_attr_entries_total",
			Help: "Cluster mode: device attribute versions read from the stream, by result (logged; malformed: not applied, logged at a limited rate)."}, []string{"result"}),
	}
	for _, col := range []prometheus.Collector{m.Bytes, m.MaxBytes, m.Fullness, m.LastSeq, m.Up, m.Position, m.CatchUpLag, m.BadMessages, m.ReadErrors, m.AttrEntries} {
		if err := reg.Register(col); err != nil {
			return nil, err
		}
	}
	var err error
	m.Snap, err = NewSnapshotMetrics(reg)
	return m, err
}

// SnapshotMetrics count state snapshot uploads and restores.
type SnapshotMetrics struct {
	Uploads  *prometheus.CounterVec // by result: ok, error, conflict, shared
	Bytes    prometheus.Gauge
	Restores *prometheus.CounterVec // by result: latest, fallback, none, unreadable, unavailable
	Gaps     prometheus.Counter
}

// NewSnapshotMetrics creates the snapshot series and registers them with
// reg.
func NewSnapshotMetrics(reg prometheus.Registerer) (*SnapshotMetrics, error) {
	m := &SnapshotMetrics{
		Uploads: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "edgeflow", Subsystem: "hub", Name: "snapshot_uploads_total",
			Help: "Cluster mode: state snapshots put into the NATS object store, by result (ok, error, conflict: another writer moved the pointer, shared: not stored while other hubs share the stream, whose partition checkpoints hold the state)."}, []string{"result"}),
		Bytes: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "edgeflow", Subsystem: "hub", Name: "snapshot_bytes",
			Help: "Cluster mode: size of the last state snapshot stored."}),
		Restores: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "edgeflow", Subsystem: "hub", Name: "snapshot_restores_total",
			Help: "Cluster mode: starts on an empty data directory, by what they restored (latest, fallback: an older generation, none: no snapshot, unreadable: none readable, unavailable: the store kept failing)."}, []string{"result"}),
		Gaps: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "edgeflow", Subsystem: "hub", Name: "snapshot_restore_gaps_total",
			Help: "Cluster mode: partitions whose messages after a restored snapshot's position the stream may no longer hold (retention dropped them before the restore)."}),
	}
	for _, c := range []prometheus.Collector{m.Uploads, m.Bytes, m.Restores, m.Gaps} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
