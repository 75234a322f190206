package registry

import (
	"encoding/hex"

	"edgeflow/hub/hublog"
	"edgeflow/wire"
)

// DedupStates derives each stream's applied ranges as the committer keeps
// them: applied and refused sequences are both done, the horizon is the
// highest sequence seen (gaps included), the last-seen time the last
// batch's server time. A hub restoring a cluster-mode state snapshot,
// which holds the registry but not the store's ranges, writes them.
func (r *Registry) DedupStates() map[hublog.StreamKey]*hublog.DedupState {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := map[hublog.StreamKey]*hublog.DedupState{}
	for dev, d := range r.devices {
		for sid, si := range d.Streams {
			var id wire.StreamID
			b, err := hex.DecodeString(sid)
			if err != nil || len(b) != len(id) {
				continue
			}
			copy(id[:], b)
			st := &hublog.DedupState{Applied: si.Applied.Clone(), LastSeenNs: si.LastServerNs}
			for _, rg := range si.Refused.Ranges() {
				st.Applied.Add(rg.First, rg.Last)
			}
			if st.Applied.Len() == 0 {
				continue
			}
			st.Horizon = max(st.Applied.Max(), si.Gaps.Max())
			out[hublog.StreamKey{Device: dev, ID: id}] = st
		}
	}
	return out
}
