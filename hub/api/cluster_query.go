package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"edgeflow/aggregate"
	"edgeflow/hub/hubapi"
	"edgeflow/wire"
)

// maxPeerJSON bounds a peer's JSON answer (a page of devices) read by a
// fan-out.
const maxPeerJSON = 256 << 20

// serveClusterAggregates answers GET /v1/aggregates for the whole fleet:
// the partials of every partition, from their owners' local=1
// /v1/partials (this hub's own from its engine), merged exactly. Each
// owner joins attribute dimensions and filters (attr.KEY) with its own
// devices' attribute table.
func (s *API) serveClusterAggregates(w http.ResponseWriter, r *http.Request) {
	q, name, _, err := s.aggregatesRequest(r)
	if err != nil {
		writeAPIError(w, err)
		return
	}
	if q.Device != "" {
		if err := wire.ValidateDeviceID(q.Device); err != nil {
			writeAPIError(w, hubapi.BadParam("device", "is not a device id: %v", err))
			return
		}
	}
	if q.WindowName != "" {
		if q.Window, err = s.windowSpec(q.WindowName); err != nil {
			writeAPIError(w, err)
			return
		}
		q.WindowName = ""
	}
	from, to := hubapi.PartialsRange(q)
	pq := aggregate.Query{Metric: q.Metric, GroupBy: q.GroupBy, Device: q.Device, AttrFilter: q.AttrFilter, From: from, To: to}
	// Every partition, even for one device's windows: Final and Behind
	// are about the whole fleet's watermarks and streams, as on one hub.
	need := allPartitions(s.cfg.Cluster.Partitions())
	answers, missing := s.gather(r.Context(), "/v1/aggregates", need, func(ctx context.Context, v *view, m int) (map[int]uint64, any, error) {
		if m == v.self {
			var ps *aggregate.PartialSet
			own := pq
			own.Keep = s.keepOwned(v.members[m].Owned)
			err := s.inSlot(ctx, func() (err error) {
				ps, err = s.eng.ExportPartialsContext(ctx, own)
				return err
			})
			return v.members[m].Owned, ps, err
		}
		pp, err := hubapi.FetchPeerPartials(ctx, s.peerClient(), v.members[m].ID, v.members[m].BaseURL, s.cfg.PeerToken, pq, from, to)
		if err != nil {
			return nil, nil, err
		}
		return pp.Partitions, pp.Set, nil
	})
	sets := make([]*aggregate.PartialSet, len(answers))
	for i, a := range answers {
		sets[i] = a.val.(*aggregate.PartialSet)
	}
	var res []aggregate.WindowResult
	err = s.inSlot(r.Context(), func() (err error) {
		res, err = hubapi.MergePartials(sets, q, len(missing) > 0)
		return err
	})
	if err != nil {
		s.writeQueryError(w, r, err, nil)
		return
	}
	head := hubapi.AggregatesResponse{Metric: q.Metric, Window: name, From: hubapi.RFC3339(q.From), To: hubapi.RFC3339(q.To),
		Aggs: q.Aggs.Names(), Partial: len(missing) > 0, MissingPartitions: missing}
	writeAggregates(w, head, res, q.Aggs)
}

// windowSpec is a configured window as a spec: peers' partials merge by
// spec, not by name.
func (s *API) windowSpec(name string) (aggregate.WindowSpec, error) {
	for _, wc := range s.eng.Options().Windows {
		if wc.Name == name {
			return wc.Spec()
		}
	}
	return aggregate.WindowSpec{}, hubapi.BadParam("window", "no configured window %q: give a configured name or kind:size (e.g. tumbling:1m)", name)
}

// serveClusterDevices answers GET /v1/devices for the whole fleet: the
// union of the owners' pages, each kept to the devices of the partitions
// it covers, cut so that the next page (after=next) skips none.
func (s *API) serveClusterDevices(w http.ResponseWriter, r *http.Request) {
	limit, after, err := devicesPageParams(r)
	if err != nil {
		writeAPIError(w, err)
		return
	}
	c := s.cfg.Cluster
	query := url.Values{"limit": {strconv.Itoa(limit)}}
	if after != "" {
		query.Set("after", after)
	}
	answers, missing := s.gather(r.Context(), "/v1/devices", allPartitions(c.Partitions()), func(ctx context.Context, v *view, m int) (map[int]uint64, any, error) {
		if m == v.self {
			devs, next := s.b.DevicesPage(after, limit)
			return v.members[m].Owned, hubapi.DevicesResponse{Devices: devs, Next: next}, nil
		}
		var page hubapi.DevicesResponse
		claimed, err := s.peerJSON(ctx, v.members[m], "/v1/devices", query, &page)
		return claimed, page, err
	})
	out := hubapi.DevicesResponse{Devices: []hubapi.DeviceInfo{}, Partial: len(missing) > 0, MissingPartitions: missing}
	bound := "" // the smallest id a peer stopped at with more to come
	for _, a := range answers {
		page := a.val.(hubapi.DevicesResponse)
		for _, d := range page.Devices {
			if _, ok := a.claimed[c.PartitionOf(d.ID)]; ok {
				out.Devices = append(out.Devices, d)
			}
		}
		if page.Next != "" && (bound == "" || page.Next < bound) {
			bound = page.Next
		}
	}
	slices.SortFunc(out.Devices, func(a, b hubapi.DeviceInfo) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	out.Devices = slices.CompactFunc(out.Devices, func(a, b hubapi.DeviceInfo) bool { return a.ID == b.ID })
	cut := len(out.Devices)
	if bound != "" {
		var found bool
		cut, found = slices.BinarySearchFunc(out.Devices, bound, func(d hubapi.DeviceInfo, id string) int {
			switch {
			case d.ID < id:
				return -1
			case d.ID > id:
				return 1
			}
			return 0
		})
		if found {
			cut++ // bound itself was on its page
		}
	}
	cut = min(cut, limit)
	if cut < len(out.Devices) || bound != "" {
		out.Devices = out.Devices[:cut]
		if cut > 0 {
			out.Next = out.Devices[cut-1].ID
		} else {
			// No device up to bound is listed (a peer's whole page was of
			// partitions it does not cover): go on past it.
			out.Next = bound
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// peerJSON asks member m for a JSON answer (local=1) and decodes it into
// dst; it returns the partitions the answer covers.
func (s *API) peerJSON(ctx context.Context, m Member, path string, query url.Values, dst any) (map[int]uint64, error) {
	resp, err := s.peerGet(ctx, m, path, query)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxPeerJSON+1))
	if err != nil {
		return nil, fmt.Errorf("hub %s: %w", m.ID, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("hub %s: %s: %s", m.ID, resp.Status, body)
	}
	if len(body) > maxPeerJSON {
		return nil, fmt.Errorf("hub %s: answer larger than %d bytes", m.ID, maxPeerJSON)
	}
	claimed, err := claimedOf(m, resp.Header)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(body, dst); err != nil {
		return nil, fmt.Errorf("hub %s: %w", m.ID, err)
	}
	return claimed, nil
}

// ownerAnswers answers a GET about the device in the path ({id}) from
// the owner of its partition (proxyToOwner), once the parameters (those
// known) and the id are checked here: the device's state and attribute
// versions are in that hub.
func (s *API) ownerAnswers(endpoint string, local http.HandlerFunc, known ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if id, _, ok := pathDevice(w, r, known...); ok {
			s.proxyToOwner(w, r, endpoint, id, local)
		}
	}
}

// proxied is an owner's answer, held until it is known to be current.
type proxied struct {
	code int
	ct   string
	body []byte
}

// proxyToOwner answers r from the owner of device's partition: this hub's
// local handler when it is the owner, else the owner's local=1 answer
// (status, type and body as they are) once its Edgeflow-Partitions names
// the partition at the view's epoch. Without a current owner within
// ClusterWait the answer is 503 naming the partition.
func (s *API) proxyToOwner(w http.ResponseWriter, r *http.Request, endpoint, device string, local http.HandlerFunc) {
	part := s.cfg.Cluster.PartitionOf(device)
	var self bool
	answers, missing := s.gather(r.Context(), endpoint, []int{part}, func(ctx context.Context, v *view, m int) (map[int]uint64, any, error) {
		if m == v.self {
			self = true
			return map[int]uint64{part: v.epoch[part]}, nil, nil
		}
		resp, err := s.peerGet(ctx, v.members[m], r.URL.Path, r.URL.Query())
		if err != nil {
			return nil, nil, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, maxPeerJSON+1))
		if err != nil || len(body) > maxPeerJSON {
			return nil, nil, fmt.Errorf("hub %s: answer unreadable or larger than %d bytes: %v", v.members[m].ID, maxPeerJSON, err)
		}
		claimed, err := claimedOf(v.members[m], resp.Header)
		if err != nil {
			return nil, nil, err
		}
		// Only the device's partition matters here.
		if e, ok := claimed[part]; ok {
			claimed = map[int]uint64{part: e}
		} else {
			claimed = map[int]uint64{part: 0}
		}
		return claimed, proxied{resp.StatusCode, resp.Header.Get("Content-Type"), body}, nil
	})
	switch {
	case len(missing) > 0:
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusServiceUnavailable, hubapi.APIError{Error: fmt.Sprintf(
			"partition %d (of device %q) has no current owner after waiting %v: a hub is taking it over; ask again", part, device, s.cfg.ClusterWait)})
	case self && answers[0].val == nil:
		w.Header().Set(hubapi.PartitionsHeader, hubapi.FormatPartitions(s.ownPartitions()))
		local(w, r)
	default:
		a := answers[0].val.(proxied)
		if a.ct != "" {
			w.Header().Set("Content-Type", a.ct)
		}
		w.WriteHeader(a.code)
		_, _ = w.Write(a.body)
	}
}

// clusterWaitMax bounds Settings.ClusterWait: a fan-out holds its query
// slot meanwhile.
const clusterWaitMax = time.Minute
