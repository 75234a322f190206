package registry

import (
	"cmp"
	"slices"

	"edgeflow/hub/hublog"
	"edgeflow/hub/ranges"
)

// recordLoss adds lost sequence numbers to a stream's gaps with reason
// GapReasonStoreDamaged; adding them again changes nothing.
func (r *Registry) recordLoss(device, stream string, lost *ranges.RangeSet) {
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

// LostSince compares the durable applied ranges (dedup) with those the
// registry rebuilt and returns, per stream, the sequence numbers the store
// says were applied but the rebuilt state lacks and no record in known
// already lists, sorted by device and stream.
func (r *Registry) LostSince(dedup map[hublog.StreamKey]*hublog.DedupState, known *hublog.KnownLosses) []hublog.LostStream {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []hublog.LostStream
	for k, d := range dedup {
		var got ranges.RangeSet
		if dev := r.devices[k.Device]; dev != nil && dev.Streams[k.ID.String()] != nil {
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
			return cmp.Compare(a.Device, b.Device)
		}
		return cmp.Compare(a.Stream, b.Stream)
	})
	return out
}

// ApplyLosses puts every loss the damage records list into the registry,
// as gaps with reason GapReasonStoreDamaged; applying them again changes
// nothing.
func (r *Registry) ApplyLosses(records []hublog.DamageRecord) {
	for _, rec := range records {
		for _, st := range rec.Streams {
			r.recordLoss(st.Device, st.Stream, &st.Lost)
		}
	}
}
