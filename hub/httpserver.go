package hub

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"

	"edgeflow/aggregate"
	"edgeflow/hub/api"
	"edgeflow/hub/hubapi"
)

// Devices returns what the hub knows of every device, sorted by id.
func (s *Server) Devices() []hubapi.DeviceInfo { return s.reg.List() }

// Device returns what the hub knows of one device.
func (s *Server) Device(id string) (hubapi.DeviceInfo, bool) { return s.reg.Get(id) }

// Handler returns the hub's HTTP API: /healthz, /readyz, /metrics,
// GET /v1/devices and GET /v1/devices/{id}, and with an engine
// (Options.Aggregate) GET /v1/aggregates, /v1/events, /v1/stream and
// /v1/late (docs/openapi.yaml), and the dashboard at / (package dashboard).
func (s *Server) Handler() http.Handler { return s.withSinks(s.api.Handler()) }

// newAPI is the HTTP API over s.
func (s *Server) newAPI() (*api.API, error) {
	var eng *aggregate.Engine
	if s.agg != nil {
		eng = s.agg.eng
	}
	cfg := api.Config{Engine: eng, Gatherer: s.opts.Gatherer, Registerer: s.opts.Registerer, Logger: s.log,
		StreamHeartbeat: s.opts.StreamHeartbeat, MaxQueries: s.opts.HTTPMaxQueries, QueryWait: s.opts.HTTPQueryWait,
		QueryTimeout: s.opts.HTTPQueryTimeout, Attrs: s.attrs, WriteToken: s.opts.HTTPWriteToken,
		ClusterWait: s.opts.HTTPClusterWait, PeerToken: s.opts.HTTPReadToken}
	if s.cl != nil {
		cfg.Cluster = &clusterAPI{s: s} // any hub answers for the whole fleet
	}
	if s.rules != nil {
		cfg.Alerts = s
	}
	return api.New(s, cfg)
}

// The Backend of package api.

// Recovered reports whether the log has been replayed.
func (s *Server) Recovered() bool { return s.recovered.Load() }

// DevicesPage returns up to limit devices after the id after, sorted by
// id, and the id to ask for next ("" at the end).
func (s *Server) DevicesPage(after string, limit int) ([]hubapi.DeviceInfo, string) {
	return s.reg.Page(after, limit)
}

// StoredEvents reads a device's events in [from, to) from the log.
func (s *Server) StoredEvents(ctx context.Context, q api.EventsQuery) (*hubapi.EventsResponse, error) {
	return s.storedEvents(ctx, q)
}

// Done is closed when the hub shuts down.
func (s *Server) Done() <-chan struct{} { return s.done }

// startHTTP listens on HTTPAddr and serves Handler in the background.
func (s *Server) startHTTP() error {
	if s.opts.HTTPAddr == HTTPOff {
		return nil
	}
	ln, err := net.Listen("tcp", s.opts.HTTPAddr)
	if err != nil {
		return fmt.Errorf("http listen %s: %w", s.opts.HTTPAddr, err)
	}
	srv, err := s.newHTTPServer(s.Handler())
	if err != nil {
		ln.Close()
		return err
	}
	if srv.TLSConfig != nil {
		ln = tls.NewListener(ln, srv.TLSConfig)
	}
	s.httpLn, s.httpSrv = ln, srv
	go func() {
		if err := s.httpSrv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("http server", "err", err)
		}
	}()
	return nil
}

// HTTPAddr returns the address the HTTP API listens on ("" if disabled).
func (s *Server) HTTPAddr() string {
	if s.httpLn == nil {
		return ""
	}
	return s.httpLn.Addr().String()
}
