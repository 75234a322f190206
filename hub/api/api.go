package api

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"edgeflow/aggregate"
	"edgeflow/hub/attrs"
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
	// Cluster, when set, makes this hub one of several sharing the fleet's
	// partitions: the query endpoints fan out to the owners and merge
	// (cluster.go). Nil: a single hub answering from its own state.
	Cluster Cluster
	// ClusterWait bounds how long a fanned-out answer waits for a
	// partition without a (current) owner before it answers partial.
	ClusterWait time.Duration
	// PeerToken is the bearer token sent to peers (the read token: every
	// hub of a cluster shares it); PeerClient asks them (nil: a default
	// client, each request bounded by its query's context).
	PeerToken  string
	PeerClient *http.Client
	// Attrs is the device attribute table (nil: no attribute endpoints);
	// WriteToken authorizes writes to it (empty: writes are refused).
	Attrs      *attrs.Table
	WriteToken string
	// Alerts lists the alerts of the hub's rules (nil: /v1/alerts lists
	// none, the hub has no rules).
	Alerts AlertSource
}

// API serves the hub's HTTP endpoints over a Backend.
type API struct {
	b    Backend
	cfg  Config
	eng  *aggregate.Engine
	gate *queryGate
	cm   *clusterMetrics // with a Cluster only
	// attrM counts attribute writes.
	attrM *attrMetrics
}

// New returns the API over b and registers its metrics.
func New(b Backend, cfg Config) (*API, error) {
	g, err := newQueryGate(cfg, cfg.Registerer)
	if err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	am, err := newAttrMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	a := &API{b: b, cfg: cfg, eng: cfg.Engine, gate: g, attrM: am}
	if cfg.Cluster != nil {
		if a.cm, err = newClusterMetrics(cfg.Registerer); err != nil {
			return nil, err
		}
	}
	return a, nil
}
