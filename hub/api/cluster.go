package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"edgeflow/aggregate"
	"edgeflow/hub/hubapi"
)

// Cluster is what the API needs of the hubs that share a fleet's
// partitions (the leases live elsewhere): who this hub is, which hub owns
// which partition at which epoch, and the status GET /v1/cluster shows.
// With a Cluster, /v1/aggregates, /v1/devices, /v1/events,
// /v1/devices/{id} and /v1/stream answer for the whole fleet from any hub
// (docs/CLUSTER.md, "One answer from any hub").
type Cluster interface {
	// Self is this hub's id, one of Members' ids.
	Self() string
	// Members are the hubs of the cluster, this one included, each with
	// the partitions it holds leases of.
	Members() []Member
	// Partitions is the stream's partition count.
	Partitions() int
	// PartitionOf is the partition of a device, in [0, Partitions()).
	PartitionOf(device string) int
	// Status is the body of GET /v1/cluster.
	Status() hubapi.ClusterStatus
	// HistoryHolders are the other hubs whose local logs may hold events
	// of the partition that this hub's does not (it owned the partition
	// before this hub took it over): GET /v1/events asks them, and names
	// those that do not answer.
	HistoryHolders(partition int) []string
}

// Member is one hub of a cluster as the view holds it.
type Member struct {
	ID      string
	BaseURL string // e.g. http://hub-a:8080, where peers reach its API
	// Owned maps each partition the hub holds a lease of to the lease's
	// epoch (its revision in the lease bucket).
	Owned map[int]uint64
}

// defaultPeerClient asks peers when Config.PeerClient is nil; requests
// are bounded by their contexts (the query's deadline).
var defaultPeerClient = &http.Client{}

// clusterRetry is how long a fan-out waits before asking again for the
// partitions it still misses (within Config.ClusterWait).
const clusterRetry = 100 * time.Millisecond

// view is one reading of the Cluster: each partition's owner (an index of
// members, -1 for none) and epoch.
type view struct {
	self    int // index of this hub in members, -1 if absent
	members []Member
	owner   []int
	epoch   []uint64
}

// readView reads the cluster once. A partition two members claim goes to
// the higher epoch (the lease's revision only grows, so the lower claim is
// a stale one); two claims at one epoch leave it without an owner.
func (s *API) readView() *view {
	c := s.cfg.Cluster
	n := c.Partitions()
	v := &view{self: -1, members: c.Members(), owner: make([]int, n), epoch: make([]uint64, n)}
	for p := range v.owner {
		v.owner[p] = -1
	}
	tie := make([]bool, n)
	for i, m := range v.members {
		if m.ID == c.Self() {
			v.self = i
		}
		for p, e := range m.Owned {
			switch {
			case p < 0 || p >= n:
			case v.owner[p] < 0 && !tie[p], e > v.epoch[p]:
				v.owner[p], v.epoch[p], tie[p] = i, e, false
			case e == v.epoch[p]:
				v.owner[p], tie[p] = -1, true
			}
		}
	}
	return v
}

// ownPartitions is this hub's partitions now, with their epochs: what a
// local answer covers and its Edgeflow-Partitions header names.
func (s *API) ownPartitions() map[int]uint64 {
	v := s.readView()
	if v.self < 0 {
		return nil
	}
	return v.members[v.self].Owned
}

// ownedKey carries a local request's owned partitions (ownPartitions, read
// once with its header) to the handler, which answers for them only.
type ownedKey struct{}

// keepOwned is the engine's Query.Keep for the devices of owned: a hub's
// engine may still hold the state of a partition it lost (until the new
// owner's checkpoint passes it), which its answers must not count.
func (s *API) keepOwned(owned map[int]uint64) func(device string) bool {
	c := s.cfg.Cluster
	return func(device string) bool {
		_, ok := owned[c.PartitionOf(device)]
		return ok
	}
}

// restrictToOwned sets q.Keep for a local request of a hub in a cluster
// (its owned partitions, from the request's context); nothing otherwise.
func (s *API) restrictToOwned(r *http.Request, q *aggregate.Query) {
	if owned, ok := r.Context().Value(ownedKey{}).(map[int]uint64); ok {
		q.Keep = s.keepOwned(owned)
	}
}

// accepts reports whether an answer of member m naming claimed covers
// only partitions the view gives m at those epochs, none of them in
// covered already (an answer that overlaps one taken would count a
// partition twice).
func (v *view) accepts(m int, claimed map[int]uint64, covered []bool) bool {
	for p, e := range claimed {
		if p < 0 || p >= len(v.owner) || v.owner[p] != m || v.epoch[p] != e || covered[p] {
			return false
		}
	}
	return true
}

// clustered routes a request of a hub in a cluster: one with local=1 is
// answered by local from this hub's own partitions (with the
// Edgeflow-Partitions header) and never fans out again; any other by
// fanout. A single hub (no Cluster) always answers with local, and
// refuses local as an unknown parameter there.
func (s *API) clustered(local, fanout http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.Cluster == nil {
			local(w, r)
			return
		}
		isLocal, r2, err := stripLocal(r)
		if err != nil {
			writeAPIError(w, err)
			return
		}
		if isLocal || fanout == nil {
			owned := s.ownPartitions()
			w.Header().Set(hubapi.PartitionsHeader, hubapi.FormatPartitions(owned))
			local(w, r2.WithContext(context.WithValue(r2.Context(), ownedKey{}, owned)))
			return
		}
		fanout(w, r2)
	}
}

// stripLocal reads and removes the local parameter, so the endpoints'
// own parameter checks see only theirs.
func stripLocal(r *http.Request) (bool, *http.Request, error) {
	v, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil || !v.Has(hubapi.LocalParam) {
		return false, r, nil // a bad query string is the endpoint's 400
	}
	if n := len(v[hubapi.LocalParam]); n > 1 {
		return false, r, hubapi.BadParam(hubapi.LocalParam, "is given %d times", n)
	}
	b, err := strconv.ParseBool(v.Get(hubapi.LocalParam))
	if err != nil {
		return false, r, hubapi.BadParam(hubapi.LocalParam, "%q must be 1 or 0", v.Get(hubapi.LocalParam))
	}
	v.Del(hubapi.LocalParam)
	r2 := r.Clone(r.Context())
	r2.URL.RawQuery = v.Encode()
	return b, r2, nil
}

// budgeted bounds a fan-out by the query budget (http-query-timeout)
// without taking a query slot: a hub waiting for its peers holds none, so
// two hubs asking each other cannot hold each other's slots. The work a
// fan-out does here (this hub's own partials, the merge) takes one with
// inSlot.
func (s *API) budgeted(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), s.gate.budget)
		defer cancel()
		h(w, r.WithContext(ctx))
	}
}

// errBusy is a fan-out's own work finding every query slot taken.
var errBusy = errors.New("busy: every query slot (http-max-queries) stayed taken for http-query-wait")

// inSlot runs fn in a query slot, or returns errBusy.
func (s *API) inSlot(ctx context.Context, fn func() error) error {
	if !s.gate.acquire(ctx) {
		return errBusy
	}
	s.gate.running.Inc()
	defer func() { s.gate.running.Dec(); s.gate.release() }()
	return fn()
}

// answer is one member's answer to a fan-out: the partitions it covers
// and what it said.
type answer struct {
	member  int
	claimed map[int]uint64
	val     any
}

// askFunc asks member m (self when it is this hub) for its part.
type askFunc func(ctx context.Context, v *view, m int) (claimed map[int]uint64, val any, err error)

// gather asks the owners of the partitions in need for their parts, all
// at once, and again every clusterRetry for those still missing (no owner,
// an owner that failed, or one whose answer the view does not accept)
// until Config.ClusterWait has passed. It returns the accepted answers and
// the partitions still missing, ascending; endpoint labels the count of
// partial answers.
func (s *API) gather(ctx context.Context, endpoint string, need []int, ask askFunc) ([]answer, []int) {
	deadline := time.Now().Add(s.cfg.ClusterWait)
	covered := make([]bool, s.cfg.Cluster.Partitions())
	var got []answer
	for {
		v := s.readView()
		var missing []int
		byOwner := map[int]bool{}
		for _, p := range need {
			if p >= 0 && p < len(covered) && !covered[p] {
				missing = append(missing, p)
				if o := v.owner[p]; o >= 0 {
					byOwner[o] = true
				}
			}
		}
		if len(missing) == 0 {
			return got, missing
		}
		if len(byOwner) == 0 && !time.Now().Before(deadline) {
			s.cm.partial.WithLabelValues(endpoint).Inc()
			return got, missing
		}
		res := make([]answer, 0, len(byOwner))
		var mu sync.Mutex
		var wg sync.WaitGroup
		for m := range byOwner {
			wg.Add(1)
			go func() {
				defer wg.Done()
				claimed, val, err := ask(ctx, v, m)
				if err != nil {
					s.cm.peerAnswers.WithLabelValues(peerFailed).Inc()
					s.cfg.Logger.Warn("cluster fan-out: a peer failed", "hub", v.members[m].ID, "err", err)
					return
				}
				mu.Lock()
				res = append(res, answer{member: m, claimed: claimed, val: val})
				mu.Unlock()
			}()
		}
		wg.Wait()
		for _, a := range res {
			if !v.accepts(a.member, a.claimed, covered) {
				s.cm.peerAnswers.WithLabelValues(peerDiscarded).Inc()
				s.cfg.Logger.Info("cluster fan-out: answer discarded (stale epoch or partitions not its own in this hub's view)",
					"hub", v.members[a.member].ID, "partitions", hubapi.FormatPartitions(a.claimed))
				continue
			}
			s.cm.peerAnswers.WithLabelValues(peerAccepted).Inc()
			for p := range a.claimed {
				covered[p] = true
			}
			got = append(got, a)
		}
		missing = missing[:0]
		for _, p := range need {
			if p >= 0 && p < len(covered) && !covered[p] {
				missing = append(missing, p)
			}
		}
		wait := min(clusterRetry, time.Until(deadline))
		if len(missing) == 0 {
			return got, missing
		}
		if wait <= 0 {
			s.cm.partial.WithLabelValues(endpoint).Inc()
			return got, missing
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			s.cm.partial.WithLabelValues(endpoint).Inc()
			return got, missing
		case <-t.C:
		}
	}
}

// allPartitions is 0..n-1.
func allPartitions(n int) []int {
	ps := make([]int, n)
	for i := range ps {
		ps[i] = i
	}
	return ps
}

// peerGet asks member m for path?query with local=1 and the peer token.
func (s *API) peerGet(ctx context.Context, m Member, path string, query url.Values) (*http.Response, error) {
	return s.peerGetWith(ctx, s.peerClient(), m, path, query)
}

// peerGetWith is peerGet with another client.
func (s *API) peerGetWith(ctx context.Context, client *http.Client, m Member, path string, query url.Values) (*http.Response, error) {
	q := url.Values{}
	for k, vs := range query {
		q[k] = vs
	}
	q.Set(hubapi.LocalParam, "1")
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.BaseURL+path+"?"+q.Encode(), nil)
	if err != nil {
		return nil, fmt.Errorf("ask hub %s: %w", m.ID, err)
	}
	if s.cfg.PeerToken != "" {
		req.Header.Set("Authorization", "Bearer "+s.cfg.PeerToken)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("ask hub %s: %w", m.ID, err)
	}
	return resp, nil
}

func (s *API) peerClient() *http.Client {
	if s.cfg.PeerClient != nil {
		return s.cfg.PeerClient
	}
	return defaultPeerClient
}

// claimedOf reads an answer's Edgeflow-Partitions header.
func claimedOf(m Member, h http.Header) (map[int]uint64, error) {
	raw, ok := h[http.CanonicalHeaderKey(hubapi.PartitionsHeader)]
	if !ok || len(raw) != 1 {
		return nil, fmt.Errorf("hub %s answered without one %s header", m.ID, hubapi.PartitionsHeader)
	}
	c, err := hubapi.ParsePartitions(raw[0])
	if err != nil {
		return nil, fmt.Errorf("hub %s: %w", m.ID, err)
	}
	return c, nil
}

// serveCluster answers GET /v1/cluster: the hubs and partitions as this
// hub's view holds them, with the applied position and lag of its own
// partitions (a local=1 answer, and a peer's part of the fleet's).
func (s *API) serveCluster(w http.ResponseWriter, r *http.Request) {
	if _, err := newParams(r); err != nil {
		writeAPIError(w, err)
		return
	}
	if s.cfg.Cluster == nil {
		writeJSON(w, http.StatusNotFound, hubapi.APIError{Error: "this hub is not part of a cluster: it owns the whole fleet alone (GET /v1/cluster needs cluster mode with several hubs)"})
		return
	}
	writeJSON(w, http.StatusOK, s.clusterStatus())
}

// clusterStatus is this hub's view, its hubs sorted by id.
func (s *API) clusterStatus() hubapi.ClusterStatus {
	st := s.cfg.Cluster.Status()
	slices.SortFunc(st.Hubs, func(a, b hubapi.ClusterHub) int { return strings.Compare(a.ID, b.ID) })
	return st
}

// clusterPeerWait bounds how long GET /v1/cluster waits for the other
// hubs' applied positions; a hub that does not answer in time leaves its
// partitions' applied and lag out.
const clusterPeerWait = 2 * time.Second

// serveClusterFleet answers GET /v1/cluster for the whole cluster: this
// hub's view, with each partition's applied position and lag from its
// owner (the owners' local=1 answers, taken only for partitions they own
// at the epoch this view gives them).
func (s *API) serveClusterFleet(w http.ResponseWriter, r *http.Request) {
	if _, err := newParams(r); err != nil {
		writeAPIError(w, err)
		return
	}
	st := s.clusterStatus()
	ctx, cancel := context.WithTimeout(r.Context(), clusterPeerWait)
	defer cancel()
	self := s.cfg.Cluster.Self()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, m := range s.cfg.Cluster.Members() {
		if m.ID == self || m.BaseURL == "" || len(m.Owned) == 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			peer, err := s.peerCluster(ctx, m)
			if err != nil {
				s.cfg.Logger.Debug("cluster status: a hub's applied positions are unknown", "hub", m.ID, "err", err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for _, pp := range peer.PartitionStates {
				p := pp.Partition
				if p < 0 || p >= len(st.PartitionStates) || pp.Owner != m.ID || m.Owned[p] != pp.Epoch {
					continue
				}
				own := &st.PartitionStates[p]
				if own.Owner == m.ID && own.Epoch == pp.Epoch {
					own.Applied, own.Lag = pp.Applied, pp.Lag
				}
			}
		}()
	}
	wg.Wait()
	writeJSON(w, http.StatusOK, st)
}

// peerCluster reads hub m's local GET /v1/cluster.
func (s *API) peerCluster(ctx context.Context, m Member) (hubapi.ClusterStatus, error) {
	var st hubapi.ClusterStatus
	resp, err := s.peerGet(ctx, m, "/v1/cluster", nil)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("hub %s: GET /v1/cluster: %s", m.ID, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxPeerJSON+1))
	if err != nil || len(body) > maxPeerJSON {
		return st, fmt.Errorf("hub %s: answer unreadable or larger than %d bytes: %v", m.ID, maxPeerJSON, err)
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return st, fmt.Errorf("hub %s: GET /v1/cluster: %v", m.ID, err)
	}
	return st, nil
}
