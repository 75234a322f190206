package api

import (
	"net/http"

	"edgeflow/aggregate"
	"edgeflow/hub/hubapi"
)

// maxQuarantineLimit caps one /v1/quarantine answer.
const maxQuarantineLimit = 10_000

// serveQuarantine answers GET /v1/quarantine?from=&limit=&device=: the
// events the engine holds out of every window (beyond future_horizon, or
// waiting for room within max_live_partials), oldest first.
func (s *API) serveQuarantine(w http.ResponseWriter, r *http.Request) {
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
	evs, next := s.eng.Quarantined(aggregate.QuarantineQuery{From: from, Max: limit, Device: p.str("device")})
	st := s.eng.Stats()
	out := hubapi.QuarantineResponse{Events: make([]hubapi.QuarantinedEventJSON, 0, len(evs)), Next: next, Held: st.QuarantineHeld,
		Quarantined: st.Quarantined, HeldForPartials: st.HeldForPartials, Released: st.QuarantineReleased, Dropped: st.QuarantineDropped}
	for _, e := range evs {
		out.Events = append(out.Events, hubapi.QuarantinedEventJSON{
			HeldEventJSON: hubapi.HeldEvent(e.Offset, e.Device, e.Stream, e.Seq, e.Metric, e.Tags, e.Value, e.Time, e.Arrived),
			UncertaintyMs: e.Uncertainty.Milliseconds(), EntersAt: hubapi.RFC3339(e.EntersAt), Reason: e.Reason})
	}
	writeData(w, out)
}
