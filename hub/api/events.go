package api

import (
	"net/http"
	"time"
)

// Bounds of GET /v1/events.
const (
	maxEventsLimit    = 10_000
	defaultEventLimit = 1000
)

// EventsQuery is a parsed /v1/events request.
type EventsQuery struct {
	Device, Metric string
	From, To       time.Time
	Limit          int
	Arrival        time.Duration
}

func (s *API) serveEvents(w http.ResponseWriter, r *http.Request) {
	q, err := s.parseEvents(r)
	if err != nil {
		writeAPIError(w, err)
		return
	}
	out, err := s.b.StoredEvents(r.Context(), q)
	if err != nil {
		s.writeQueryError(w, r, err, nil)
		return
	}
	writeData(w, out)
}

// parseEvents reads the parameters of /v1/events.
func (s *API) parseEvents(r *http.Request) (q EventsQuery, err error) {
	p, err := newParams(r, "device", "metric", "from", "to", "limit", "arrived_within")
	if err != nil {
		return q, err
	}
	if q.Device, err = p.required("device"); err == nil {
		q.Metric = p.str("metric")
		q.From, q.To, err = p.timeRange()
	}
	if err == nil {
		q.Limit, err = p.intIn("limit", defaultEventLimit, 1, maxEventsLimit)
	}
	if err == nil {
		q.Arrival, err = p.duration("arrived_within", 0, s.eng.Options().LateHorizon)
	}
	return q, err
}
