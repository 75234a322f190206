package api

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"edgeflow/aggregate"
	"edgeflow/hub/hubapi"
)

// Backend is what the HTTP API needs of the hub; *hub.Server implements
// it. The API reads through it and never holds the hub's locks itself.
type Backend interface {
	// Ready reports whether recovery is done and the broker is connected
	// (GET /readyz).
	Ready() bool
	// Recovered reports whether the log has been replayed: until then the
	// engine holds a partial state and the query endpoints answer 503.
	Recovered() bool
	// DevicesPage returns up to limit devices after the id after, sorted
	// by id, and the id to ask for next ("" at the end).
	DevicesPage(after string, limit int) ([]hubapi.DeviceInfo, string)
	// Device returns what the hub knows of one device.
	Device(id string) (hubapi.DeviceInfo, bool)
	// StoredEvents reads a device's events from the log (GET /v1/events).
	StoredEvents(ctx context.Context, q EventsQuery) (*hubapi.EventsResponse, error)
	// Done is closed when the hub shuts down, so that open streams end.
	Done() <-chan struct{}
}

// Config is the API's share of the hub's options (hub.Options names each
// field's default and flag).
type Config struct {
	Engine          *aggregate.Engine     // nil: no query endpoints
	Gatherer        prometheus.Gatherer   // served at /metrics
	Registerer      prometheus.Registerer // the query gate's metrics
	Logger          *slog.Logger
	StreamHeartbeat time.Duration // comment line on an idle /v1/stream
	MaxQueries      int           // expensive queries running at once
	QueryWait       time.Duration // how long a query waits for a slot before a 429
	QueryTimeout    time.Duration // one query's deadline
	Alerts          AlertSource   // nil: /v1/alerts lists none (the hub has no rules)
}

// API serves the hub's HTTP endpoints over a Backend.
type API struct {
	b    Backend
	cfg  Config
	eng  *aggregate.Engine
	gate *queryGate
}

// New returns the API over b and registers its metrics.
func New(b Backend, cfg Config) (*API, error) {
	g, err := newQueryGate(cfg, cfg.Registerer)
	if err != nil {
		return nil, err
	}
	return &API{b: b, cfg: cfg, eng: cfg.Engine, gate: g}, nil
}
