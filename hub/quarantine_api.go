package hub

import (
	"net/http"

	"edgeflow/aggregate"
)

// QuarantineResponse is the body of GET /v1/quarantine.
type QuarantineResponse struct {
	Events []QuarantinedEventJSON `json:"events"`
	// Next is the offset to ask for next (from=next).
	Next uint64 `json:"next"`
	// Held is how many events the quarantine holds now.
	Held int `json:"held"`
	// Quarantined counts events held for being beyond future_horizon,
	// HeldForPartials those held for max_live_partials, Released those
	// that entered their windows since and Dropped those a full quarantine
	// dropped, all since the engine started.
	Quarantined     uint64 `json:"quarantined"`
	HeldForPartials uint64 `json:"held_for_partials"`
	Released        uint64 `json:"released"`
	Dropped         uint64 `json:"dropped"`
}

// QuarantinedEventJSON is one held event.
type QuarantinedEventJSON struct {
	HeldEventJSON
	UncertaintyMs int64  `json:"uncertainty_ms"`
	EntersAt      string `json:"enters_at"`
	Reason        string `json:"reason"`
}

// maxQuarantineLimit caps one /v1/quarantine answer.
const maxQuarantineLimit = 10_000

// serveQuarantine answers GET /v1/quarantine?from=&limit=&device=: the
// events the engine holds out of every window (beyond future_horizon, or
// waiting for room within max_live_partials), oldest first.
func (s *Server) serveQuarantine(w http.ResponseWriter, r *http.Request) {
	p, err := newParams(r, "from", "limit", "device")
	if err != nil {
		writeAPIError(w, err)
		return
	}
	limit, err := p.intIn("limit", 1000, 1, maxQuarantineLimit)
	if err != nil {
		writeAPIError(w, err)
		return
	}
	from, err := p.uint("from", 0)
	if err != nil {
		writeAPIError(w, err)
		return
	}
	evs, next := s.agg.eng.Quarantined(aggregate.QuarantineQuery{From: from, Max: limit, Device: p.str("device")})
	st := s.agg.eng.Stats()
	out := QuarantineResponse{Events: make([]QuarantinedEventJSON, 0, len(evs)), Next: next, Held: st.QuarantineHeld,
		Quarantined: st.Quarantined, HeldForPartials: st.HeldForPartials, Released: st.QuarantineReleased, Dropped: st.QuarantineDropped}
	for _, e := range evs {
		out.Events = append(out.Events, QuarantinedEventJSON{
			HeldEventJSON: heldEvent(e.Offset, e.Device, e.Stream, e.Seq, e.Metric, e.Tags, e.Value, e.Time, e.Arrived),
			UncertaintyMs: e.Uncertainty.Milliseconds(), EntersAt: rfc3339(e.EntersAt), Reason: e.Reason})
	}
	writeData(w, out)
}
