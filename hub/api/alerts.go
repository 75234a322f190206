package api

import (
	"errors"
	"net/http"

	"edgeflow/hub/hubapi"
	"edgeflow/hub/rules"
)

// AlertSource lists the rules' alerts and streams their revisions;
// *hub.Server is one.
type AlertSource interface {
	Alerts(f rules.Filter) ([]rules.Alert, string, error)
	SubscribeAlerts(buffer int) *rules.AlertSubscription
}

// alertSubBuffer bounds the alert revisions buffered per /v1/stream client.
const alertSubBuffer = 1024

// subscribeAlerts returns the live alert feed for /v1/stream: a nil
// channel (never ready) without rules.
func (s *API) subscribeAlerts() (<-chan rules.Alert, func()) {
	if s.cfg.Alerts == nil {
		return nil, func() {}
	}
	sub := s.cfg.Alerts.SubscribeAlerts(alertSubBuffer)
	if sub == nil {
		return nil, func() {}
	}
	return sub.Alerts(), sub.Close
}

// AlertsResponse is the answer of GET /v1/alerts.
type AlertsResponse struct {
	Alerts []rules.Alert `json:"alerts"`
	// Next, when set, is the cursor of the next page.
	Next string `json:"next,omitempty"`
}

// registerAlertsAPI adds GET /v1/alerts with the engine's endpoints (rules
// need the engine); a hub without rules lists no alerts.
func (s *API) registerAlertsAPI(mux *http.ServeMux) {
	if s.eng == nil {
		return
	}
	mux.HandleFunc("GET /v1/alerts", s.whenRecovered(s.serveAlerts))
}

// serveAlerts answers GET /v1/alerts?from=&to=&rule=&state=&limit=&cursor=:
// alerts with from <= start < to, in (start, id) order.
func (s *API) serveAlerts(w http.ResponseWriter, r *http.Request) {
	p, err := newParams(r, "from", "to", "rule", "state", "limit", "cursor")
	if err != nil {
		writeAPIError(w, err)
		return
	}
	f, err := alertFilter(p)
	if err != nil {
		writeAPIError(w, err)
		return
	}
	var as []rules.Alert
	var next string
	if s.cfg.Alerts != nil {
		as, next, err = s.cfg.Alerts.Alerts(f)
	}
	switch {
	case errors.Is(err, rules.ErrBadCursor):
		writeAPIError(w, hubapi.BadParam("cursor", "is not a cursor this endpoint returned"))
		return
	case err != nil:
		writeAPIError(w, err)
		return
	}
	if as == nil {
		as = []rules.Alert{}
	}
	writeData(w, AlertsResponse{Alerts: as, Next: next})
}

func alertFilter(p params) (rules.Filter, error) {
	var f rules.Filter
	var err error
	if f.From, err = p.time("from"); err != nil {
		return f, err
	}
	if f.To, err = p.time("to"); err != nil {
		return f, err
	}
	if !f.From.IsZero() && !f.To.IsZero() && !f.From.Before(f.To) {
		return f, hubapi.BadParam("to", "must be after from")
	}
	f.Rule = p.str("rule")
	switch st := rules.State(p.str("state")); st {
	case "", rules.Firing, rules.Resolved:
		f.State = st
	default:
		return f, hubapi.BadParam("state", "must be firing or resolved, got %q", st)
	}
	if f.Limit, err = p.intIn("limit", rules.DefaultQueryLimit, 1, rules.MaxQueryLimit); err != nil {
		return f, err
	}
	f.Cursor = p.str("cursor")
	return f, nil
}
