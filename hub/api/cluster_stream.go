package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"edgeflow/hub/hubapi"
)

// Bounds of a merged /v1/stream.
const (
	peerStreamLine  = 1 << 20     // longest line read from a peer's stream
	peerStreamRetry = time.Second // wait before reconnecting to a peer
	peerStreamQueue = 1024        // peer events queued for the client
)

// peerEvent is one server-sent event of a peer's stream.
type peerEvent struct {
	name string
	data json.RawMessage
}

// serveClusterStream answers GET /v1/stream for the whole fleet: it opens
// every hub's local=1 stream (this one's too) with the request's
// parameters and relays their events, each data object given a "hub"
// field naming its hub. Merged-stream offsets are per hub, so from and
// Last-Event-ID are refused here (ask a hub with local=1 to resume) and
// relayed events carry no id. A peer whose stream ends is announced
// ("peer_gone") and asked again every second from its current end; a
// client that does not keep up loses events (a "dropped" event says so)
// rather than holding the peers back.
func (s *API) serveClusterStream(w http.ResponseWriter, r *http.Request) {
	if _, err := s.parseStream(r); err != nil {
		writeAPIError(w, err)
		return
	}
	if r.URL.Query().Has("from") {
		writeAPIError(w, hubapi.BadParam("from", "offsets of the merged stream are per hub: resume from one hub with local=1"))
		return
	}
	if r.Header.Get("Last-Event-ID") != "" {
		writeAPIError(w, hubapi.BadParam("Last-Event-ID", "offsets of the merged stream are per hub: resume from one hub with local=1"))
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	events := make(chan peerEvent, peerStreamQueue)
	v := s.readView()
	for _, m := range v.members {
		go s.followPeer(ctx, m, r.URL.Query(), events)
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	out := &sseWriter{w: bufio.NewWriter(w), rc: http.NewResponseController(w)}
	out.comment(fmt.Sprintf("edgeflow stream, merged from %d hubs", len(v.members)))
	if out.flush() != nil {
		return
	}
	ping := time.NewTicker(s.cfg.StreamHeartbeat)
	defer ping.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.b.Done():
			return
		case <-ping.C:
			out.comment("ping")
		case e := <-events:
			out.event(e.name, "", e.data)
		}
		if out.flush() != nil {
			return
		}
	}
}

// followPeer relays member m's local stream into events until ctx ends,
// reconnecting after peerStreamRetry when it ends.
func (s *API) followPeer(ctx context.Context, m Member, query map[string][]string, events chan<- peerEvent) {
	for ctx.Err() == nil {
		err := s.readPeerStream(ctx, m, query, events)
		if ctx.Err() != nil {
			return
		}
		msg, _ := json.Marshal(map[string]string{"hub": m.ID, "error": err.Error()})
		send(ctx, events, peerEvent{name: "peer_gone", data: msg})
		t := time.NewTimer(peerStreamRetry)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// send queues e; when the client's queue is full the event is dropped and
// the client told so.
func send(ctx context.Context, events chan<- peerEvent, e peerEvent) {
	select {
	case events <- e:
	case <-ctx.Done():
	default:
		msg, _ := json.Marshal(map[string]string{"error": "client too slow: events of the merged stream were dropped"})
		select {
		case events <- peerEvent{name: "dropped", data: msg}:
		case <-ctx.Done():
		}
	}
}

// readPeerStream reads one connection to m's stream; it returns why it
// ended.
func (s *API) readPeerStream(ctx context.Context, m Member, query map[string][]string, events chan<- peerEvent) error {
	c := *s.peerClient()
	c.Timeout = 0 // a stream lasts as long as the client listens
	resp, err := s.peerGetWith(ctx, &c, m, "/v1/stream", query)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("hub %s: %s", m.ID, resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), peerStreamLine)
	var name string
	var data []byte
	for sc.Scan() {
		line := sc.Bytes()
		switch {
		case len(line) == 0:
			if name != "" && data != nil {
				send(ctx, events, peerEvent{name: name, data: withHub(m.ID, data)})
			}
			name, data = "", nil
		case bytes.HasPrefix(line, []byte("event: ")):
			name = string(line[len("event: "):])
		case bytes.HasPrefix(line, []byte("data: ")):
			data = append([]byte(nil), line[len("data: "):]...)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("hub %s: %w", m.ID, err)
	}
	return fmt.Errorf("hub %s: stream ended", m.ID)
}

// withHub adds "hub": id to a JSON object (any other value is wrapped as
// {"hub": id, "data": value}).
func withHub(id string, data []byte) json.RawMessage {
	hub, _ := json.Marshal(id)
	d := bytes.TrimSpace(data)
	if !json.Valid(d) {
		d, _ = json.Marshal(string(d))
	}
	if len(d) >= 2 && d[0] == '{' {
		out := append([]byte(`{"hub":`), hub...)
		if rest := bytes.TrimSpace(d[1:]); len(rest) > 0 && rest[0] != '}' {
			out = append(out, ',')
		}
		return append(out, d[1:]...)
	}
	return json.RawMessage(fmt.Sprintf(`{"hub":%s,"data":%s}`, hub, d))
}
