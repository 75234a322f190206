package api

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"edgeflow/dashboard"
	"edgeflow/hub/hubapi"
	"edgeflow/wire"
)

// Handler returns the hub's HTTP API: /healthz, /readyz, /metrics,
// GET /v1/devices and GET /v1/devices/{id}, and with an engine
// (Options.Aggregate) GET /v1/aggregates, /v1/events, /v1/stream and
// /v1/late (docs/openapi.yaml), and the dashboard at / (package dashboard).
func (s *API) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", s.serveReady)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.cfg.Gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /v1/devices", s.clustered(s.serveDevices, s.serveClusterDevices))
	mux.HandleFunc("GET /v1/devices/{id}", s.clustered(s.serveDevice, s.ownerAnswers("/v1/devices/{id}", s.serveDevice)))
	mux.HandleFunc("GET /v1/cluster", s.clustered(s.serveCluster, s.serveClusterFleet))
	s.registerQueryAPI(mux)
	s.registerAttrsAPI(mux)
	s.registerAlertsAPI(mux)
	mux.Handle("GET /{$}", dashboard.Handler())
	mux.Handle("GET "+dashboard.Prefix, dashboard.Handler())
	return mux
}

// serveReady answers 200 once recovery is done and the broker is connected;
// otherwise 503 with the reason, when the backend tells one.
func (s *API) serveReady(w http.ResponseWriter, _ *http.Request) {
	if s.b.Ready() {
		_, _ = w.Write([]byte("ready\n"))
		return
	}
	why := "recovering, shutting down or broker not connected"
	if r, ok := s.b.(interface{ NotReadyReason() string }); ok {
		if reason := r.NotReadyReason(); reason != "" {
			why = reason
		}
	}
	http.Error(w, "not ready: "+why, http.StatusServiceUnavailable)
}

// Paging of GET /v1/devices.
const (
	// defaultDevicesLimit is the page size when limit is not given.
	defaultDevicesLimit = 1000
	// maxDevicesLimit is the largest page a client may ask for.
	maxDevicesLimit = 10000
)

// devicesPageParams reads /v1/devices' limit and after, each checked.
func devicesPageParams(r *http.Request) (limit int, after string, err error) {
	p, err := newParams(r, "limit", "after")
	if err != nil {
		return 0, "", err
	}
	if limit, err = p.intIn("limit", defaultDevicesLimit, 1, maxDevicesLimit); err != nil {
		return 0, "", err
	}
	if after = p.str("after"); after != "" {
		if err := wire.ValidateDeviceID(after); err != nil {
			return 0, "", hubapi.BadParam("after", "is not a device id: %v", err)
		}
	}
	return limit, after, nil
}

// serveDevices answers GET /v1/devices?limit=&after=.
func (s *API) serveDevices(w http.ResponseWriter, r *http.Request) {
	limit, after, err := devicesPageParams(r)
	if err != nil {
		writeAPIError(w, err)
		return
	}
	devs, next := s.b.DevicesPage(after, limit)
	writeJSON(w, http.StatusOK, hubapi.DevicesResponse{Devices: devs, Next: next})
}

// pathDevice checks r's parameters (those known) and the device id of
// its path ({id}), answering 400 naming the one that is bad; ok false
// then.
func pathDevice(w http.ResponseWriter, r *http.Request, known ...string) (id string, p params, ok bool) {
	p, err := newParams(r, known...)
	if err != nil {
		writeAPIError(w, err)
		return "", p, false
	}
	id = r.PathValue("id")
	if err := wire.ValidateDeviceID(id); err != nil {
		writeAPIError(w, hubapi.BadParam("id", "is not a device id: %v", err))
		return "", p, false
	}
	return id, p, true
}

// serveDevice answers GET /v1/devices/{id}.
func (s *API) serveDevice(w http.ResponseWriter, r *http.Request) {
	id, _, ok := pathDevice(w, r)
	if !ok {
		return
	}
	d, ok := s.b.Device(id)
	if !ok {
		writeJSON(w, http.StatusNotFound, hubapi.APIError{Error: fmt.Sprintf("device %q unknown", id)})
		return
	}
	writeJSON(w, http.StatusOK, d)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}
