package api

import "github.com/prometheus/client_golang/prometheus"

// clusterMetrics count what the fan-outs of a hub in a cluster met, so an
// operator sees answers going partial and peers being discarded.
type clusterMetrics struct {
	peerAnswers *prometheus.CounterVec // by result
	partial     *prometheus.CounterVec // by endpoint
}

// Labels of edgeflow_hub_cluster_peer_answers_total{result}.
const (
	peerAccepted  = "accepted"
	peerDiscarded = "discarded" // stale epoch, or partitions not the peer's in this hub's view
	peerFailed    = "failed"    // no answer, an error status, or a malformed one
)

// newClusterMetrics creates and registers the metrics; nil reg: not
// registered (tests).
func newClusterMetrics(reg prometheus.Registerer) (*clusterMetrics, error) {
	m := &clusterMetrics{
		peerAnswers: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "edgeflow", Subsystem: "hub",
			Name: "cluster_peer_answers_total",
			Help: "Answers of hubs (this one's own included) to this hub's fan-outs, by result: accepted, discarded (an epoch older than this hub's view, or partitions not that hub's in it) or failed."},
			[]string{"result"}),
		partial: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "edgeflow", Subsystem: "hub",
			Name: "cluster_partial_answers_total",
			Help: "Fleet-wide answers given without some partitions after http-cluster-wait (partial: true, or a 503 for one device), by endpoint."},
			[]string{"endpoint"}),
	}
	for _, r := range []string{peerAccepted, peerDiscarded, peerFailed} {
		m.peerAnswers.WithLabelValues(r)
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.peerAnswers, m.partial} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}
