package hub

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"edgeflow/hub/hublog"
	"edgeflow/hub/ranges"
)

// recordLoss adds lost sequence numbers to a stream's gaps with reason
// GapReasonStoreDamaged; adding them again changes nothing.
func (r *registry) recordLoss(device, stream string, lost *ranges.RangeSet) {
	r.mu.Lock()
	defer r.mu.Unlock()
	d := r.device(device)
	s := d.Streams[stream]
	if s == nil {
		s = &streamInfo{}
		d.Streams[stream] = s
	}
	for _, l := range lost.Ranges() {
		if added := s.Gaps.Add(l.First, l.Last); added > 0 {
			if s.GapReasons == nil {
				s.GapReasons = map[string]uint64{}
			}
			s.GapReasons[hublog.GapReasonStoreDamaged] += added
		}
	}
}

// lostSince compares the durable applied ranges with those the registry
// rebuilt and returns, per stream, the sequence numbers the store says
// were applied but the rebuilt state lacks and no record already lists.
func lostSince(reg *registry, dedup map[hublog.StreamKey]*hublog.DedupState, known *hublog.KnownLosses) []hublog.LostStream {
	reg.mu.RLock()
	defer reg.mu.RUnlock()
	var out []hublog.LostStream
	for k, d := range dedup {
		var got ranges.RangeSet
		if dev := reg.devices[k.Device]; dev != nil && dev.Streams[k.ID.String()] != nil {
			si := dev.Streams[k.ID.String()]
			got = si.Applied.Clone()
			// Refused events count as done in the stored ranges too.
			for _, r := range si.Refused.Ranges() {
				got.Add(r.First, r.Last)
			}
		}
		if rs := known.Streams[k.Device+"/"+k.ID.String()]; rs != nil {
			for _, r := range rs.Ranges() {
				got.Add(r.First, r.Last)
			}
		}
		var lost ranges.RangeSet
		for _, r := range d.Applied.Ranges() {
			for _, m := range got.Missing(nil, r.First, r.Last) {
				lost.Add(m.First, m.Last)
			}
		}
		if lost.Len() > 0 {
			out = append(out, hublog.LostStream{Device: k.Device, Stream: k.ID.String(), Lost: lost})
		}
	}
	slices.SortFunc(out, func(a, b hublog.LostStream) int {
		if a.Device != b.Device {
			return cmpString(a.Device, b.Device)
		}
		return cmpString(a.Stream, b.Stream)
	})
	return out
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// applyLosses puts every recorded loss into the registry.
func applyLosses(reg *registry, records []hublog.DamageRecord) {
	for _, r := range records {
		for _, st := range r.Streams {
			reg.recordLoss(st.Device, st.Stream, &st.Lost)
		}
	}
}

// damageMetrics count what recovery found damaged (prefix edgeflow_hub_).
type damageMetrics struct {
	fallbacks  *prometheus.CounterVec // by to: previous, log
	damaged    prometheus.Counter
	lostEvents prometheus.Gauge
}

func newDamageMetrics(reg prometheus.Registerer) (*damageMetrics, error) {
	m := &damageMetrics{
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "edgeflow", Subsystem: "hub", Name: "checkpoint_fallbacks_total",
			Help: "Damaged checkpoints passed over at start, by what recovery used instead: previous (the checkpoint before it) or log (a replay of the whole log)."}, []string{"to"}),
		damaged: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "edgeflow", Subsystem: "hub", Name: "store_damaged_entries_total",
			Help: "Log positions found unreadable or missing at start and skipped (recover-damaged); the loss is recorded."}),
		lostEvents: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "edgeflow", Subsystem: "hub", Name: "store_lost_events",
			Help: "Events of known streams recorded as lost to store damage (gap reason store_damaged), over the store's life."}),
	}
	m.fallbacks.WithLabelValues("previous")
	m.fallbacks.WithLabelValues("log")
	for _, c := range []prometheus.Collector{m.fallbacks, m.damaged, m.lostEvents} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
