package api

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"edgeflow/aggregate"
	"edgeflow/hub/attrs"
	"edgeflow/hub/hubapi"
	"edgeflow/wire"
)

// AttrWrite is one attribute version to write for a device.
type AttrWrite struct {
	Device  string
	Version attrs.Version
}

// AttrWriter is the Backend's side of attribute writes (*hub.Server
// implements it): it logs each version as a log entry and returns once
// they are applied.
type AttrWriter interface {
	WriteAttributes(ctx context.Context, ws []AttrWrite) error
}

// ErrAttrWritesUnsupported is returned by an AttrWriter that cannot log
// attribute versions: the API answers 501.
var ErrAttrWritesUnsupported = errors.New("this hub does not take attribute writes")

// ErrStoredNotApplied is returned by a cluster-mode AttrWriter when the
// stream stored a write (it is durable and will be applied by the hub
// reading its partition) but this hub has not applied it yet: the API
// answers 202, and writing the same version again is harmless.
var ErrStoredNotApplied = errors.New("stored in the stream, not yet applied by this hub")

// PartlyStoredError is returned by a cluster-mode AttrWriter when the
// stream stored the first Stored of a write's Total versions and then
// refused one or did not confirm it: the API answers 503 with stored.
// The stored ones are durable and will be applied; the rest may or may
// not be stored, and writing them again (or the whole write) is harmless.
type PartlyStoredError struct {
	Stored, Total int
	Err           error
}

func (e *PartlyStoredError) Error() string {
	if e.Stored == 0 {
		return fmt.Sprintf("none of the %d writes is known stored: write them again: %v", e.Total, e.Err)
	}
	return fmt.Sprintf("writes 1-%d of %d are stored and will be applied; %d-%d may not be: write them again (a stored version written again changes nothing): %v",
		e.Stored, e.Total, e.Stored+1, e.Total, e.Err)
}

func (e *PartlyStoredError) Unwrap() error { return e.Err }

// ErrNotReady is returned by an AttrWriter that is recovering or
// shutting down: the API answers 503.
var ErrNotReady = errors.New("the hub is recovering or shutting down")

// maxBulkLines bounds the versions of one bulk write (its body is
// bounded by http-max-request-bytes too).
const maxBulkLines = 100_000

// attrMetrics count attribute writes by result.
type attrMetrics struct {
	writes *prometheus.CounterVec
}

func newAttrMetrics(reg prometheus.Registerer) (*attrMetrics, error) {
	m := &attrMetrics{writes: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "edgeflow_hub_attribute_writes_total",
		Help: "Device attribute versions written through the HTTP API, by result (ok; stored: in the cluster's stream, not yet applied by this hub; bad_request, unauthorized, unsupported, failed).",
	}, []string{"result"})}
	if reg == nil {
		return m, nil
	}
	if err := reg.Register(m.writes); err != nil {
		return nil, err
	}
	return m, nil
}

// registerAttrsAPI adds the attribute endpoints (docs/openapi.yaml).
func (s *API) registerAttrsAPI(mux *http.ServeMux) {
	if s.cfg.Attrs == nil {
		return
	}
	mux.HandleFunc("PUT /v1/devices/{id}/attributes", s.whenRecovered(s.servePutAttrs))
	mux.HandleFunc("POST /v1/attributes/bulk", s.whenRecovered(s.serveBulkAttrs))
	// In a cluster a device's versions are in its partition owner's table.
	mux.HandleFunc("GET /v1/devices/{id}/attributes", s.whenRecovered(s.clustered(s.serveAttrsAt,
		s.ownerAnswers("/v1/devices/{id}/attributes", s.serveAttrsAt, "at"))))
	mux.HandleFunc("GET /v1/devices/{id}/attributes/history", s.whenRecovered(s.clustered(s.serveAttrsHistory,
		s.ownerAnswers("/v1/devices/{id}/attributes/history", s.serveAttrsHistory))))
}

// attrWriteRequest reports whether r is an attribute write: it is
// authorized by the write token (checkWriteToken), not the read token.
func attrWriteRequest(r *http.Request) bool {
	return (r.Method == http.MethodPut && strings.HasPrefix(r.URL.Path, "/v1/devices/") && strings.HasSuffix(r.URL.Path, "/attributes")) ||
		(r.Method == http.MethodPost && r.URL.Path == "/v1/attributes/bulk")
}

// checkWriteToken answers 403 when writes are off (no write token) and
// 401 for a missing or wrong token; true when the write may go on.
func (s *API) checkWriteToken(w http.ResponseWriter, r *http.Request) bool {
	if s.cfg.WriteToken == "" {
		s.attrM.writes.WithLabelValues("unauthorized").Inc()
		writeJSON(w, http.StatusForbidden, hubapi.APIError{Error: "attribute writes are off: set http-write-token (or http-write-token-file) to allow them"})
		return false
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	a, b := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(s.cfg.WriteToken))
	if !ok || subtle.ConstantTimeCompare(a[:], b[:]) != 1 {
		s.attrM.writes.WithLabelValues("unauthorized").Inc()
		w.Header().Set("WWW-Authenticate", `Bearer realm="edgeflow-write"`)
		writeJSON(w, http.StatusUnauthorized, hubapi.APIError{Error: "missing or wrong write token (attribute writes take the http-write-token, not the read token)"})
		return false
	}
	return true
}

// attrBody is the JSON of one write: PUT's body, or a bulk line with id.
type attrBody struct {
	ID            string            `json:"id,omitempty"`
	Attributes    map[string]string `json:"attributes"`
	EffectiveFrom json.RawMessage   `json:"effective_from,omitempty"`
}

// resolution is the engine's bucket width: versions start on its
// boundaries (0 without an engine: any time).
func (s *API) resolution() int64 {
	if s.eng == nil {
		return 0
	}
	return int64(s.eng.Options().Resolution)
}

// parseEffectiveFrom reads effective_from (RFC 3339 or Unix ms; absent:
// now, floored to the resolution) and refuses a time off a bucket
// boundary, naming the boundaries around it.
func (s *API) parseEffectiveFrom(raw json.RawMessage, now time.Time) (int64, error) {
	res := s.resolution()
	if len(raw) == 0 || string(raw) == "null" {
		ns := now.UnixNano()
		if res > 0 {
			ns = floorTo(ns, res)
		}
		return ns, nil
	}
	var ns int64
	var str string
	if err := json.Unmarshal(raw, &str); err == nil {
		t, err := time.Parse(time.RFC3339Nano, str)
		if err != nil {
			return 0, hubapi.BadParam("effective_from", "is not an RFC 3339 time or Unix milliseconds: %q", truncateStr(str))
		}
		ns = t.UnixNano()
	} else {
		ms, err := strconv.ParseInt(string(raw), 10, 64)
		if err != nil || ms > math.MaxInt64/int64(time.Millisecond) || ms < math.MinInt64/int64(time.Millisecond) {
			return 0, hubapi.BadParam("effective_from", "is not an RFC 3339 time or Unix milliseconds (an integer in range)")
		}
		ns = ms * 1e6
	}
	if res > 0 && ns%res != 0 {
		lo := floorTo(ns, res)
		return 0, hubapi.BadParam("effective_from", "%s is not on a boundary of the engine's resolution (%v): versions apply from bucket starts and are never rounded; use %s or %s",
			rfc(ns), time.Duration(res), rfc(lo), rfc(lo+res))
	}
	return ns, nil
}

func floorTo(ns, res int64) int64 {
	q := ns / res
	if ns%res < 0 {
		q--
	}
	return q * res
}

func rfc(ns int64) string { return time.Unix(0, ns).UTC().Format(time.RFC3339Nano) }

func truncateStr(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// parseAttrBody decodes one write, naming the bad field.
func (s *API) parseAttrBody(data []byte, now time.Time) (attrBody, int64, error) {
	var b attrBody
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		return b, 0, hubapi.BadParam(jsonField(err), "%v", err)
	}
	if dec.More() {
		return b, 0, hubapi.BadParam("body", "holds more than one JSON object")
	}
	if b.Attributes == nil {
		return b, 0, hubapi.BadParam("attributes", "is required (an object of string values; {} for none)")
	}
	if err := s.cfg.Attrs.Limits().Validate(b.Attributes); err != nil {
		var fe *attrs.FieldError
		if errors.As(err, &fe) {
			return b, 0, hubapi.BadParam(fe.Field, "%s", fe.Reason)
		}
		return b, 0, err
	}
	from, err := s.parseEffectiveFrom(b.EffectiveFrom, now)
	return b, from, err
}

// jsonField names the field a JSON decoding error is about.
func jsonField(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return te.Field
	}
	if msg := err.Error(); strings.HasPrefix(msg, "json: unknown field ") {
		return strings.Trim(strings.TrimPrefix(msg, "json: unknown field "), `"`)
	}
	return "body"
}

// attrVersionJSON is one version in an answer.
type attrVersionJSON struct {
	Device          string            `json:"device"`
	Attributes      map[string]string `json:"attributes"`
	EffectiveFrom   string            `json:"effective_from"`
	EffectiveFromMs int64             `json:"effective_from_ms"`
	Written         string            `json:"written,omitempty"`
}

func versionJSON(device string, v attrs.Version) attrVersionJSON {
	out := attrVersionJSON{Device: device, Attributes: v.Attrs, EffectiveFrom: rfc(v.From), EffectiveFromMs: v.From / 1e6}
	if out.Attributes == nil {
		out.Attributes = map[string]string{}
	}
	if v.Written != 0 {
		out.Written = rfc(v.Written)
	}
	return out
}

// servePutAttrs answers PUT /v1/devices/{id}/attributes.
func (s *API) servePutAttrs(w http.ResponseWriter, r *http.Request) {
	if !s.checkWriteToken(w, r) {
		return
	}
	id := r.PathValue("id")
	if err := wire.ValidateDeviceID(id); err != nil {
		s.badWrite(w, hubapi.BadParam("id", "is not a device id: %v", err))
		return
	}
	data, err := readBody(r)
	if err != nil {
		s.badWrite(w, err)
		return
	}
	b, from, err := s.parseAttrBody(data, time.Now())
	if err != nil {
		s.badWrite(w, err)
		return
	}
	if b.ID != "" && b.ID != id {
		s.badWrite(w, hubapi.BadParam("id", "the body's id %q differs from the path's %q", truncateStr(b.ID), id))
		return
	}
	ws := []AttrWrite{{Device: id, Version: attrs.Version{From: from, Attrs: b.Attributes}}}
	if !s.write(w, r, ws) {
		return
	}
	writeJSON(w, http.StatusOK, versionJSON(id, ws[0].Version))
}

// serveBulkAttrs answers POST /v1/attributes/bulk: NDJSON, one write
// with its "id" a line. Nothing is written unless every line is valid.
func (s *API) serveBulkAttrs(w http.ResponseWriter, r *http.Request) {
	if !s.checkWriteToken(w, r) {
		return
	}
	sc := bufio.NewScanner(r.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	now := time.Now()
	var ws []AttrWrite
	for line := 1; sc.Scan(); line++ {
		text := bytes.TrimSpace(sc.Bytes())
		if len(text) == 0 {
			continue
		}
		if len(ws) >= maxBulkLines {
			s.badWrite(w, hubapi.BadParam("body", "more than %d lines in one bulk write", maxBulkLines))
			return
		}
		b, from, err := s.parseAttrBody(text, now)
		if err == nil {
			err = wire.ValidateDeviceID(b.ID)
			if err != nil {
				err = hubapi.BadParam("id", "is not a device id: %v", err)
			}
		}
		if err != nil {
			var pe *aggregate.ParamError
			if errors.As(err, &pe) {
				err = hubapi.BadParam(fmt.Sprintf("line %d: %s", line, pe.Param), "%s", pe.Reason)
			}
			s.badWrite(w, err)
			return
		}
		ws = append(ws, AttrWrite{Device: b.ID, Version: attrs.Version{From: from, Attrs: b.Attributes}})
	}
	if err := sc.Err(); err != nil {
		s.badWrite(w, hubapi.BadParam("body", "%v", err))
		return
	}
	if !s.write(w, r, ws) {
		return
	}
	writeJSON(w, http.StatusOK, map[string]int{"written": len(ws)})
}

// readBody reads a (bounded: Guard) request body.
func readBody(r *http.Request) ([]byte, error) {
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(r.Body); err != nil {
		return nil, hubapi.BadParam("body", "%v", err)
	}
	return buf.Bytes(), nil
}

func (s *API) badWrite(w http.ResponseWriter, err error) {
	s.attrM.writes.WithLabelValues("bad_request").Inc()
	writeAPIError(w, err)
}

// write hands ws to the backend and answers its failure; true when all
// were applied.
func (s *API) write(w http.ResponseWriter, r *http.Request, ws []AttrWrite) bool {
	aw, ok := s.b.(AttrWriter)
	if !ok {
		s.attrM.writes.WithLabelValues("unsupported").Add(float64(len(ws)))
		writeJSON(w, http.StatusNotImplemented, hubapi.APIError{Error: "this hub does not take attribute writes"})
		return false
	}
	err := aw.WriteAttributes(r.Context(), ws)
	var fe *attrs.FieldError
	var pe *PartlyStoredError
	switch {
	case err == nil:
		s.attrM.writes.WithLabelValues("ok").Add(float64(len(ws)))
		return true
	case errors.As(err, &pe):
		s.attrM.writes.WithLabelValues("stored").Add(float64(pe.Stored))
		s.attrM.writes.WithLabelValues("failed").Add(float64(pe.Total - pe.Stored))
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusServiceUnavailable, hubapi.APIError{Error: err.Error(), Stored: &pe.Stored})
	case errors.As(err, &fe):
		s.attrM.writes.WithLabelValues("bad_request").Add(float64(len(ws)))
		writeJSON(w, http.StatusBadRequest, hubapi.APIError{Error: err.Error(), Param: fe.Field})
	case errors.Is(err, ErrStoredNotApplied):
		s.attrM.writes.WithLabelValues("stored").Add(float64(len(ws)))
		writeJSON(w, http.StatusAccepted, hubapi.APIError{Error: err.Error()})
	case errors.Is(err, ErrAttrWritesUnsupported):
		s.attrM.writes.WithLabelValues("unsupported").Add(float64(len(ws)))
		writeJSON(w, http.StatusNotImplemented, hubapi.APIError{Error: err.Error()})
	case errors.Is(err, ErrNotReady):
		s.attrM.writes.WithLabelValues("failed").Add(float64(len(ws)))
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusServiceUnavailable, hubapi.APIError{Error: err.Error()})
	default:
		s.attrM.writes.WithLabelValues("failed").Add(float64(len(ws)))
		writeJSON(w, http.StatusInternalServerError, hubapi.APIError{Error: err.Error()})
	}
	return false
}

// serveAttrsAt answers GET /v1/devices/{id}/attributes?at= (default now).
func (s *API) serveAttrsAt(w http.ResponseWriter, r *http.Request) {
	id, p, ok := pathDevice(w, r, "at")
	if !ok {
		return
	}
	at, err := p.time("at")
	if err != nil {
		writeAPIError(w, err)
		return
	}
	if at.IsZero() {
		at = time.Now()
	}
	v, ok := s.cfg.Attrs.At(id, at.UnixNano())
	if !ok {
		writeJSON(w, http.StatusNotFound, hubapi.APIError{Error: fmt.Sprintf("device %q has no attribute version in force at %s", id, rfc(at.UnixNano())), Param: "at"})
		return
	}
	writeJSON(w, http.StatusOK, versionJSON(id, v))
}

// serveAttrsHistory answers GET /v1/devices/{id}/attributes/history.
func (s *API) serveAttrsHistory(w http.ResponseWriter, r *http.Request) {
	id, _, ok := pathDevice(w, r)
	if !ok {
		return
	}
	vs := s.cfg.Attrs.AttrVersions(id)
	out := struct {
		Device   string            `json:"device"`
		Versions []attrVersionJSON `json:"versions"`
	}{Device: id, Versions: make([]attrVersionJSON, 0, len(vs))}
	for _, v := range vs {
		out.Versions = append(out.Versions, versionJSON(id, v))
	}
	writeJSON(w, http.StatusOK, out)
}

// attrFilter reads the attr.KEY=VALUE parameters of a query.
func attrFilter(p params) map[string]string {
	var f map[string]string
	for k := range p.v {
		if key, ok := strings.CutPrefix(k, aggregate.AttrPrefix); ok {
			if f == nil {
				f = map[string]string{}
			}
			f[key] = p.v.Get(k)
		}
	}
	return f
}

// attrsAt returns device's attributes at ns for enrichment (nil: none).
func (s *API) attrsAt(device string, ns int64) map[string]string {
	if s.cfg.Attrs == nil {
		return nil
	}
	return aggregate.AttrAt(s.cfg.Attrs.AttrVersions(device), ns)
}
