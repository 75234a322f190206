package api

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"edgeflow/hub/hubapi"
	"edgeflow/wire"
)

// PeersParam asks the owner of a device's partition, in a local=1
// GET /v1/events, to add the events its peers' local logs hold for the
// device to its own: a hub that answers for the fleet sends it with the
// request it relays to the owner.
const PeersParam = "peers"

// historyPeerWait bounds how long an owner waits for its peers' local
// events; a peer that does not answer in time is named in missing_hubs.
const historyPeerWait = 5 * time.Second

// serveClusterEvents answers GET /v1/events for the whole cluster: the
// owner of the device's partition answers, adding what the other hubs'
// local logs hold (serveOwnerEvents), relayed by proxyToOwner.
func (s *API) serveClusterEvents(w http.ResponseWriter, r *http.Request) {
	q, err := s.parseEvents(r)
	if err == nil {
		if verr := wire.ValidateDeviceID(q.Device); verr != nil {
			err = hubapi.BadParam("device", "is not a device id: %v", verr)
		}
	}
	if err != nil {
		writeAPIError(w, err)
		return
	}
	r2 := r.Clone(r.Context())
	v := r2.URL.Query()
	v.Set(PeersParam, "1")
	r2.URL.RawQuery = v.Encode()
	s.proxyToOwner(w, r2, "/v1/events", q.Device, s.localEvents)
}

// localEvents answers a local=1 GET /v1/events: this hub's log only, or
// with peers=1 (a hub of a cluster, asked as the device's owner) the
// merge of its own events with its peers' (serveOwnerEvents).
func (s *API) localEvents(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Cluster != nil {
		v, err := url.ParseQuery(r.URL.RawQuery)
		if err == nil && v.Has(PeersParam) {
			if v.Get(PeersParam) != "1" || len(v[PeersParam]) > 1 {
				writeAPIError(w, hubapi.BadParam(PeersParam, "must be given once, as 1"))
				return
			}
			v.Del(PeersParam)
			r2 := r.Clone(r.Context())
			r2.URL.RawQuery = v.Encode()
			s.budgeted(s.serveOwnerEvents)(w, r2)
			return
		}
	}
	s.gated(s.serveEvents)(w, r)
}

// peerEventsAnswer is one peer's local answer to GET /v1/events.
type peerEventsAnswer struct {
	hub string
	out *hubapi.EventsResponse
	err error
}

// serveOwnerEvents answers GET /v1/events as the owner of the device's
// partition: its own log's events together with those of every other
// hub's local log, where a hub that owned the partition before (or
// applied its batches past the checkpoint its successor started from)
// keeps the events it applied. Each event is listed once (by stream and
// sequence, this hub's copy first), with its attributes from this hub's
// table, the partition's; a hub that does not answer is named in
// missing_hubs. Like the fan-outs, it holds a query slot only for its own
// read, not while it waits for its peers.
func (s *API) serveOwnerEvents(w http.ResponseWriter, r *http.Request) {
	q, err := s.parseEvents(r)
	if err != nil {
		writeAPIError(w, err)
		return
	}
	self := s.cfg.Cluster.Self()
	var peers []Member
	var missing []string // hubs not asked or not answering
	asked := map[string]bool{self: true}
	for _, m := range s.cfg.Cluster.Members() {
		asked[m.ID] = true
		switch {
		case m.ID == self:
		case m.BaseURL == "":
			missing = append(missing, m.ID) // it gave no address to ask it at
		default:
			peers = append(peers, m)
		}
	}
	// A hub that held the partition and is no member now (stopped, or
	// gone) cannot be asked: the events only it applied are missing.
	for _, id := range s.cfg.Cluster.HistoryHolders(s.cfg.Cluster.PartitionOf(q.Device)) {
		if !asked[id] {
			missing = append(missing, id)
		}
	}
	answers := make([]peerEventsAnswer, len(peers))
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(r.Context(), historyPeerWait)
	defer cancel()
	for i, m := range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := s.peerEvents(ctx, m, r.URL.Query())
			answers[i] = peerEventsAnswer{hub: m.ID, out: out, err: err}
		}()
	}
	var own *hubapi.EventsResponse
	err = s.inSlot(r.Context(), func() (err error) {
		own, err = s.b.StoredEvents(r.Context(), q)
		return err
	})
	wg.Wait()
	if err != nil {
		s.writeQueryError(w, r, err, nil)
		return
	}
	for i := range own.Events {
		own.Events[i].Hub = self
	}
	pages := []*hubapi.EventsResponse{own}
	for _, a := range answers {
		if a.err != nil {
			s.cm.peerAnswers.WithLabelValues(peerFailed).Inc()
			s.cfg.Logger.Debug("events: a hub's local log is not in the answer", "hub", a.hub, "device", q.Device, "err", a.err)
			missing = append(missing, a.hub)
			continue
		}
		s.cm.peerAnswers.WithLabelValues(peerAccepted).Inc()
		for i := range a.out.Events {
			e := &a.out.Events[i]
			e.Hub, e.Attributes = a.hub, nil
			if s.cfg.Attrs != nil {
				if v, ok := s.cfg.Attrs.At(q.Device, e.EventNs); ok {
					e.Attributes = v.Attrs
				}
			}
		}
		pages = append(pages, a.out)
	}
	out := mergeEventPages(pages, q.Limit)
	slices.Sort(missing)
	out.MissingHubs = missing
	writeData(w, out)
}

// peerEvents asks hub m for its local log's events of the query.
func (s *API) peerEvents(ctx context.Context, m Member, query url.Values) (*hubapi.EventsResponse, error) {
	resp, err := s.peerGet(ctx, m, "/v1/events", query)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxPeerJSON+1))
	if err != nil || len(body) > maxPeerJSON {
		return nil, fmt.Errorf("hub %s: answer unreadable or larger than %d bytes: %v", m.ID, maxPeerJSON, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("hub %s: %s: %s", m.ID, resp.Status, strings.TrimSpace(string(body)))
	}
	var out hubapi.EventsResponse
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, fmt.Errorf("hub %s: %w", m.ID, err)
	}
	for i := range out.Events {
		t, err := time.Parse(time.RFC3339Nano, out.Events[i].Time)
		if err != nil {
			return nil, fmt.Errorf("hub %s: event %d: time %q: %w", m.ID, i, out.Events[i].Time, err)
		}
		out.Events[i].EventNs = t.UnixNano()
	}
	if out.Truncated {
		if _, err := time.Parse(time.RFC3339Nano, out.NextFrom); err != nil {
			return nil, fmt.Errorf("hub %s: next_from %q: %w", m.ID, out.NextFrom, err)
		}
	}
	return &out, nil
}

// mergeEventPages merges pages of one query's events from several hubs'
// logs, the first the owner's: each page is sorted by event time and holds
// at most limit events, and one that was cut there says where it stopped
// (next_from). The merge is complete up to the earliest such stop, so it
// keeps the events up to it (those exactly at it are repeated by the next
// page, as on one hub), lists each (stream, seq) once, the first page's
// copy first, and is cut at limit in turn.
func mergeEventPages(pages []*hubapi.EventsResponse, limit int) *hubapi.EventsResponse {
	out := *pages[0]
	out.Events = []hubapi.EventJSON{}
	out.Truncated, out.NextFrom = false, ""
	type key struct {
		stream string
		seq    uint64
	}
	seen := map[key]bool{}
	var stop int64
	var stopAt string
	for _, p := range pages {
		if !p.Truncated {
			continue
		}
		t, _ := time.Parse(time.RFC3339Nano, p.NextFrom) // checked by peerEvents; the owner's own
		if stopAt == "" || t.UnixNano() < stop {
			stop, stopAt = t.UnixNano(), p.NextFrom
		}
	}
	for i, p := range pages {
		if i > 0 {
			out.Scanned += p.Scanned
			out.Backfilling = out.Backfilling || p.Backfilling
		}
		for _, e := range p.Events {
			k := key{e.Stream, e.Seq}
			if seen[k] || (stopAt != "" && e.EventNs > stop) {
				continue
			}
			seen[k] = true
			out.Events = append(out.Events, e)
		}
	}
	slices.SortFunc(out.Events, func(a, b hubapi.EventJSON) int {
		return cmp.Or(cmp.Compare(a.EventNs, b.EventNs), strings.Compare(a.Stream, b.Stream), cmp.Compare(a.Seq, b.Seq))
	})
	switch {
	case len(out.Events) > limit:
		out.Truncated, out.NextFrom = true, out.Events[limit].Time
		out.Events = out.Events[:limit]
	case stopAt != "":
		out.Truncated, out.NextFrom = true, stopAt
	}
	return &out
}
