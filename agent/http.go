package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"edgeflow/buffer"
	"edgeflow/uplink"
)

// Handler is the agent's HTTP API: POST /v1/events, GET /v1/status,
// GET /healthz and GET /metrics.
func (a *Agent) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/events", a.serveEvents)
	mux.HandleFunc("GET /v1/status", a.serveStatus)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	if a.opts.Gatherer != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(a.opts.Gatherer, promhttp.HandlerOpts{}))
	}
	return mux
}

// IngestResult is the answer to a successful POST /v1/events.
type IngestResult struct {
	Accepted int    `json:"accepted"`
	FirstSeq uint64 `json:"first_seq"`
	LastSeq  uint64 `json:"last_seq"`
	// Durability is the buffer's mode the events were stored under.
	Durability string `json:"durability"`
}

// errorBody is every error answer.
type errorBody struct {
	Error string `json:"error"`
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// serveEvents parses the whole body, then stores all of its events in one
// append, or none of them.
func (a *Agent) serveEvents(w http.ResponseWriter, r *http.Request) {
	a.m.httpRequests.Add(1)
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, a.opts.MaxBodyBytes))
	if err != nil {
		a.m.httpRejected.Add(1)
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeJSON(w, http.StatusRequestEntityTooLarge, errorBody{fmt.Sprintf("body exceeds %d bytes; split it", mbe.Limit)})
			return
		}
		writeJSON(w, http.StatusBadRequest, errorBody{"reading body: " + err.Error()})
		return
	}
	st := a.clock.Stamp() // capture: before parsing, so it is the arrival time
	pts, err := parseJSONEvents(body, a.opts.MaxRequestEvents)
	if err == nil && len(pts) == 0 {
		err = fmt.Errorf("%w: no events in the body", ErrBadEvent)
	}
	var recs [][]byte
	if err == nil {
		// Stamped as they will be stored, and checked as the hub will
		// check them: what the hub would refuse is refused here, before
		// anything is stored.
		recs, err = encodePoints(pts, st)
	}
	if err != nil {
		a.m.httpRejected.Add(1)
		code := http.StatusInternalServerError
		if errors.Is(err, ErrBadEvent) {
			code = http.StatusBadRequest
			a.m.countRefused(sourceHTTP, err)
		}
		writeJSON(w, code, errorBody{err.Error() + "; nothing of this request was stored"})
		return
	}
	rng, err := a.st.Append(r.Context(), recs, buffer.AppendOptions{WaitDurable: true})
	if err != nil {
		a.m.httpRejected.Add(1)
		code := http.StatusServiceUnavailable
		switch {
		case errors.Is(err, buffer.ErrTooLarge):
			code = http.StatusRequestEntityTooLarge
		case errors.Is(err, buffer.ErrFull):
			w.Header().Set("Retry-After", "5")
		}
		writeJSON(w, code, errorBody{err.Error() + "; nothing of this request was stored"})
		return
	}
	a.m.httpEvents.Add(uint64(len(recs)))
	a.up.Notify()
	writeJSON(w, http.StatusOK, IngestResult{Accepted: len(recs), FirstSeq: rng.First, LastSeq: rng.Last,
		Durability: string(a.opts.Buffer.Durability)})
}

// Status is the answer of GET /v1/status.
type Status struct {
	DeviceID string        `json:"device_id"`
	StreamID string        `json:"stream_id"`
	Version  string        `json:"version,omitempty"`
	Buffer   BufferStatus  `json:"buffer"`
	Clock    ClockStatus   `json:"clock"`
	Link     uplink.Status `json:"link"`
	Ingest   IngestStatus  `json:"ingest"`
}

// BufferStatus describes what the buffer holds for the hub.
type BufferStatus struct {
	// Depth is the events not yet acknowledged by the hub.
	Depth uint64 `json:"depth"`
	Bytes int64  `json:"bytes"`
	// OldestUnsentAgeSeconds is the age of the oldest unacknowledged
	// event (by append time); 0 when empty.
	OldestUnsentAgeSeconds float64    `json:"oldest_unsent_age_s"`
	Oldest                 time.Time  `json:"oldest,omitzero"`
	NextSeq                uint64     `json:"next_seq"`
	AckedThrough           uint64     `json:"acked_through"`
	Gaps                   int        `json:"gaps"`
	DroppedSinceStart      uint64     `json:"dropped_since_start"`
	Durability             string     `json:"durability"`
	Profile                string     `json:"profile"`
	Disk                   DiskStatus `json:"disk"`
	// CapacityBytes is the buffer's bound (Bytes counts against it) and
	// FillRate the recent change of Bytes in bytes/s over
	// FillRateIntervalSeconds (about a minute): what the agent's status
	// message reports to the hub for its buffer rules.
	CapacityBytes           int64   `json:"capacity_bytes"`
	FillRate                float64 `json:"fill_rate_bytes_per_s"`
	FillRateIntervalSeconds float64 `json:"fill_rate_interval_s"`
}

// DiskStatus is the buffer's free-space guard: while Limited, ingest gets
// the full-buffer policy (503 with Retry-After, or drop oldest) so the
// filesystem never fills under the buffer's memory-mapped writes.
type DiskStatus struct {
	Enabled        bool   `json:"enabled"`
	FreeBytes      int64  `json:"free_bytes"`
	ReserveBytes   int64  `json:"reserve_bytes"`
	Limited        bool   `json:"limited"`
	RefusedAppends uint64 `json:"refused_appends"`
	DroppedAppends uint64 `json:"dropping_appends"`
}

// ClockStatus is the clock estimate events are stamped with.
type ClockStatus struct {
	Trusted       bool      `json:"trusted"`
	Method        string    `json:"method"`
	OffsetNs      int64     `json:"offset_ns"`
	UncertaintyNs int64     `json:"uncertainty_ns"`
	DriftPPM      float64   `json:"drift_ppm"`
	Source        string    `json:"source,omitempty"`
	SampledAt     time.Time `json:"sampled_at,omitzero"`
}

// IngestStatus counts what the agent took in since it started.
type IngestStatus struct {
	HTTPEvents       uint64 `json:"http_events"`
	HTTPRejected     uint64 `json:"http_rejected_requests"`
	UDPEvents        uint64 `json:"udp_events"`
	UDPBadLines      uint64 `json:"udp_bad_lines"`
	RepairedEvents   uint64 `json:"repaired_events"`
	UntrustedSentEvs uint64 `json:"untrusted_sent_events"`
}

// Status returns a snapshot of the agent.
func (a *Agent) Status() Status {
	bs := a.st.Stats()
	s := Status{DeviceID: a.opts.DeviceID, StreamID: a.sid, Version: a.opts.Version,
		Buffer: BufferStatus{Depth: bs.Depth, Bytes: bs.Bytes, NextSeq: bs.Next, AckedThrough: bs.Acked,
			Gaps: bs.Gaps, DroppedSinceStart: bs.Dropped,
			Durability: string(a.opts.Buffer.Durability), Profile: string(a.opts.Buffer.Profile)},
		Link: a.up.Status(),
		Ingest: IngestStatus{HTTPEvents: a.m.httpEvents.Load(), HTTPRejected: a.m.httpRejected.Load(),
			UDPEvents: a.m.udpEvents.Load(), UDPBadLines: a.m.udpBadLines.Load(),
			RepairedEvents: a.m.repaired.Load(), UntrustedSentEvs: a.m.sentUntrusted.Load()},
	}
	f := a.st.Fill()
	s.Buffer.CapacityBytes, s.Buffer.FillRate, s.Buffer.FillRateIntervalSeconds = f.CapacityBytes, f.Rate, f.RateInterval.Seconds()
	ds := a.store.DiskStatus()
	s.Buffer.Disk = DiskStatus{Enabled: ds.Enabled, FreeBytes: ds.FreeBytes, ReserveBytes: ds.ReserveBytes,
		Limited: ds.Limited, RefusedAppends: ds.RefusedAppends, DroppedAppends: ds.DroppedAppends}
	if bs.OldestMs > 0 && bs.Depth > 0 {
		s.Buffer.Oldest = time.UnixMilli(bs.OldestMs)
		s.Buffer.OldestUnsentAgeSeconds = max(a.opts.Now().Sub(s.Buffer.Oldest).Seconds(), 0)
	}
	e := a.clock.Estimate()
	s.Clock = ClockStatus{Trusted: e.Trusted(), Method: e.Method.String(), OffsetNs: int64(e.Offset),
		UncertaintyNs: int64(e.Uncertainty), DriftPPM: e.Drift, Source: e.Source, SampledAt: e.SampledAt}
	return s
}

func (a *Agent) serveStatus(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, a.Status())
}
