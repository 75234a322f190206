package api

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"edgeflow/aggregate"
	"edgeflow/hub/hubapi"
)

// Bounds of GET /v1/stream.
const (
	streamSubBuffer  = 4096             // engine updates buffered per client before it is dropped
	streamReadBatch  = 1000             // merged-stream events read per step
	streamWriteLimit = 10 * time.Second // a client that takes longer to accept a write is dropped
)

// streamReq is a parsed /v1/stream request.
type streamReq struct {
	metric, window string
	groupBy        []string
	aggs           aggregate.Aggs
	events         bool
	cursor         uint64 // next merged-stream offset to send
}

func (s *API) parseStream(r *http.Request) (*streamReq, error) {
	p, err := newParams(r, "metric", "window", "group_by", "aggs", "events", "from")
	if err != nil {
		return nil, err
	}
	q := &streamReq{metric: p.str("metric"), window: p.str("window"), groupBy: p.list("group_by")}
	if q.window != "" && !s.configuredWindow(q.window) {
		return nil, hubapi.BadParam("window", "no configured window %q (updates are announced for configured windows)", q.window)
	}
	if q.metric == "" && (p.has("group_by") || p.has("aggs")) {
		return nil, hubapi.BadParam("metric", "is required with group_by or aggs")
	}
	if q.aggs, err = aggregate.ParseAggs(p.list("aggs")); err != nil {
		return nil, err
	}
	if q.events, err = p.bool("events", false); err != nil {
		return nil, err
	}
	_, q.cursor = s.eng.StreamOffsets()
	if id := r.Header.Get("Last-Event-ID"); id != "" && !p.has("from") {
		n, err := strconv.ParseUint(id, 10, 64)
		if err != nil {
			return nil, hubapi.BadParam("Last-Event-ID", "%q is not an event id of this stream", id)
		}
		q.cursor, q.events = n+1, true
	}
	if p.has("from") {
		if q.cursor, err = p.uint("from", 0); err != nil {
			return nil, err
		}
		q.events = true
	}
	return q, nil
}

func (s *API) configuredWindow(name string) bool {
	for _, w := range s.eng.Options().Windows {
		if w.Name == name {
			return true
		}
	}
	return false
}

// serveStream sends server-sent events: "watermark", "final" and
// "revised" updates of configured windows (with the metric's results when
// metric is given), merged-stream events ("event", id = offset) when
// events=true or from/Last-Event-ID is given, "gap" when the resume offset
// has left the buffer, "alert" for each new alert revision of the hub's
// rules, a ": ping" comment every StreamHeartbeat, and a
// last "dropped" event when the client fell too far behind.
func (s *API) serveStream(w http.ResponseWriter, r *http.Request) {
	q, err := s.parseStream(r)
	if err != nil {
		writeAPIError(w, err)
		return
	}
	sub := s.eng.Subscribe(streamSubBuffer)
	defer sub.Close()
	alerts, closeAlerts := s.subscribeAlerts()
	defer closeAlerts()
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	out := &sseWriter{w: bufio.NewWriter(w), rc: rc}
	out.comment("edgeflow stream")
	if q.events {
		s.sendStreamEvents(out, q)
	}
	if out.flush() != nil {
		return
	}
	ping := time.NewTicker(s.cfg.StreamHeartbeat)
	defer ping.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-s.b.Done(): // shutting down: an open stream must not hold up http.Server.Shutdown
			return
		case <-ping.C:
			out.comment("ping")
		case a, ok := <-alerts:
			if !ok {
				out.event("dropped", "", map[string]any{"error": "alert feed: client too slow", "resume_from": q.cursor})
				_ = out.flush()
				return
			}
			out.event("alert", "", a)
		case u, ok := <-sub.Updates():
			if !ok {
				reason := "stream closed"
				if err := sub.Err(); err != nil {
					reason = err.Error()
				}
				out.event("dropped", "", map[string]any{"error": reason, "resume_from": q.cursor})
				_ = out.flush()
				return
			}
			s.sendUpdate(out, q, u)
		}
		if out.flush() != nil {
			return
		}
	}
}

// sendUpdate writes one engine update as the request wants it.
func (s *API) sendUpdate(out *sseWriter, q *streamReq, u aggregate.Update) {
	switch u.Kind {
	case aggregate.UpdateWatermark:
		out.event("watermark", "", hubapi.StreamUpdate{Watermark: hubapi.RFC3339(u.Watermark), WatermarkMs: u.Watermark.UnixMilli()})
	case aggregate.UpdateFinal, aggregate.UpdateRevised:
		if (q.window != "" && u.Window != q.window) || (q.metric != "" && u.Metric != "" && u.Metric != q.metric) {
			return
		}
		su := hubapi.StreamUpdate{Window: u.Window, Metric: u.Metric, Start: hubapi.RFC3339(u.Start), End: hubapi.RFC3339(u.End),
			StartMs: u.Start.UnixMilli(), EndMs: u.End.UnixMilli()}
		if q.metric != "" {
			su.Metric = q.metric
			su.Windows = s.updateWindows(q, u)
		}
		out.event(u.Kind.String(), "", su)
	case aggregate.UpdateAttributes:
		out.event("attributes", "", versionJSON(u.Device, aggregate.AttrVersion{From: u.Start.UnixNano(), Attrs: u.Attrs}))
	case aggregate.UpdateStream:
		if q.events {
			s.sendStreamEvents(out, q)
		}
	}
}

// updateWindows queries the metric's windows that an update is about.
func (s *API) updateWindows(q *streamReq, u aggregate.Update) []hubapi.WindowJSON {
	aq := aggregate.Query{Metric: q.metric, WindowName: u.Window, From: u.Start, To: u.Start.Add(1), GroupBy: q.groupBy, Aggs: q.aggs}
	if u.Window == "" {
		aq.Window = aggregate.WindowSpec{Kind: aggregate.Tumbling, Size: u.End.Sub(u.Start)}
	}
	res, err := s.eng.Query(aq)
	if err != nil {
		return nil
	}
	return hubapi.WindowsJSON(res, aq.Aggs)
}

// sendStreamEvents writes the merged stream from q.cursor up to its end.
func (s *API) sendStreamEvents(out *sseWriter, q *streamReq) {
	for out.err == nil {
		evs, next, err := s.eng.ReadStream(q.cursor, streamReadBatch)
		if errors.Is(err, aggregate.ErrOffsetTooOld) {
			out.event("gap", "", map[string]any{"from": q.cursor, "oldest": next, "error": err.Error()})
			q.cursor = next
			continue
		}
		if err != nil || len(evs) == 0 {
			return
		}
		for _, e := range evs {
			out.event("event", strconv.FormatUint(e.Offset, 10), hubapi.StreamEventJSON{Offset: e.Offset, Device: e.Device,
				Stream: hubapi.StreamHex(e.Stream), Seq: e.Seq, Metric: e.Metric, Tags: hubapi.TagMap(e.Tags), Value: e.Value,
				Time: hubapi.RFC3339(e.Time), TimeMs: e.Time.UnixMilli(), Late: e.Late, Attributes: s.attrsAt(e.Device, e.Time.UnixNano())})
		}
		q.cursor = next
	}
}

// sseWriter writes server-sent events; the first error sticks.
type sseWriter struct {
	w   *bufio.Writer
	rc  *http.ResponseController
	err error
}

func (o *sseWriter) event(name, id string, data any) {
	if o.err != nil {
		return
	}
	b, err := json.Marshal(data)
	if err != nil {
		o.err = err
		return
	}
	if id != "" {
		fmt.Fprintf(o.w, "id: %s\n", id)
	}
	fmt.Fprintf(o.w, "event: %s\ndata: %s\n\n", name, b)
}

func (o *sseWriter) comment(text string) {
	if o.err == nil {
		fmt.Fprintf(o.w, ": %s\n\n", text)
	}
}

// flush sends what is buffered; a client that does not take it within
// streamWriteLimit gets an error here and is dropped.
func (o *sseWriter) flush() error {
	if o.err != nil {
		return o.err
	}
	_ = o.rc.SetWriteDeadline(time.Now().Add(streamWriteLimit))
	if o.err = o.w.Flush(); o.err == nil {
		o.err = o.rc.Flush()
	}
	return o.err
}
