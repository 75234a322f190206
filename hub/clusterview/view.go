// Package clusterview is the api.Cluster of a hub in cluster mode, fed by
// its lease.Manager: the members are the live hubs with the API base URLs
// their heartbeats advertise, each with the partitions it holds leases of
// at their epochs, so any hub's HTTP API can answer for the whole fleet
// (docs/CLUSTER.md, "One answer from any hub").
package clusterview

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"edgeflow/hub/api"
	"edgeflow/hub/hubapi"
	"edgeflow/hub/lease"
	"edgeflow/hub/natslog"
)

// Options configure a View.
type Options struct {
	// Applied returns, for the partitions this hub applies, the last
	// stream sequence it applied in each. GET /v1/cluster reports it and
	// the lag for the partitions this hub owns. nil: unknown.
	Applied func() map[int]uint64
	// StreamLast returns partition p's last stream sequence
	// ((*natslog.Log).PartitionLastSeq has this signature). nil: unknown.
	StreamLast func(ctx context.Context, p int) (uint64, error)
	// StatusTimeout bounds the StreamLast reads of one Status; partitions
	// not read within it are reported without stream_last. Default 2s.
	StatusTimeout time.Duration
	// StreamLastMaxAge is how long a Status reuses the last StreamLast
	// reads, so frequent GET /v1/cluster calls do not each read every
	// partition. Default 1s.
	StreamLastMaxAge time.Duration
	// Holders returns the hubs whose local logs hold events of partition
	// p this hub's does not (hub.Server.HistoryHolders). nil: none known.
	Holders func(p int) []string
}

// DefaultStatusTimeout is Options.StatusTimeout's default.
const DefaultStatusTimeout = 2 * time.Second

// DefaultStreamLastMaxAge is Options.StreamLastMaxAge's default.
const DefaultStreamLastMaxAge = time.Second

// streamReaders is how many StreamLast reads one Status runs at once.
const streamReaders = 8

// View is an api.Cluster read from a lease.Manager. Every call reads the
// manager's current view of the lease bucket; nothing is cached but the
// stream's last sequences (Options.StreamLastMaxAge).
type View struct {
	m *lease.Manager
	o Options

	mu       sync.Mutex // held while reading the stream's last sequences
	readAt   time.Time
	last     []uint64
	lastKnow []bool
}

var _ api.Cluster = (*View)(nil)

// New returns the view of m. The hub runs m (Run) and stops it; the view
// only reads it.
func New(m *lease.Manager, o Options) (*View, error) {
	if m == nil {
		return nil, errors.New("clusterview: no lease manager")
	}
	switch {
	case o.StatusTimeout < 0:
		return nil, errors.New("clusterview: StatusTimeout must not be negative")
	case o.StatusTimeout == 0:
		o.StatusTimeout = DefaultStatusTimeout
	}
	switch {
	case o.StreamLastMaxAge < 0:
		return nil, errors.New("clusterview: StreamLastMaxAge must not be negative")
	case o.StreamLastMaxAge == 0:
		o.StreamLastMaxAge = DefaultStreamLastMaxAge
	}
	return &View{m: m, o: o}, nil
}

// Self is this hub's id (lease.Options.HubID).
func (v *View) Self() string { return v.m.HubID() }

// HistoryHolders are Options.Holders' hubs for partition p.
func (v *View) HistoryHolders(p int) []string {
	if v.o.Holders == nil {
		return nil
	}
	return v.o.Holders(p)
}

// Partitions is the stream's partition count.
func (v *View) Partitions() int { return v.m.Partitions() }

// PartitionOf is the partition the stream stores device's batches in:
// natslog.PartitionOf, the function of the stream's subject transform.
func (v *View) PartitionOf(device string) int { return natslog.PartitionOf(device, v.m.Partitions()) }

// Members are the live hubs (heartbeat seen within TTL + Renew), this one
// always included, each with the base URL its heartbeat advertises
// (trailing '/' removed) and the partitions whose leases it holds at
// their epochs. This hub's own partitions are those it owns now
// (lease.Manager.Owns), so its Edgeflow-Partitions header never names a
// partition it stopped applying; a lease this hub's view names it the
// holder of without owning it is left out. A hub holding a lease without
// a live heartbeat is a member without URL: asking it fails, and its
// partitions are reported missing.
func (v *View) Members() []api.Member {
	return members(v.m.Leases())
}

func members(st lease.Status) []api.Member {
	out := make([]api.Member, 0, len(st.Hubs))
	idx := make(map[string]int, len(st.Hubs))
	for _, h := range st.Hubs {
		idx[h.ID] = len(out)
		out = append(out, api.Member{ID: h.ID, BaseURL: strings.TrimRight(h.URL, "/"), Owned: map[int]uint64{}})
	}
	for _, ps := range st.Partitions {
		if ps.Owner == "" || ps.Owner == st.HubID && !ps.Mine {
			continue
		}
		i, ok := idx[ps.Owner]
		if !ok {
			i = len(out)
			idx[ps.Owner] = i
			out = append(out, api.Member{ID: ps.Owner, Owned: map[int]uint64{}})
		}
		out[i].Owned[ps.Partition] = ps.Epoch
	}
	return out
}

// Status is the body of GET /v1/cluster: the members, and per partition
// its owner, epoch and lease expiry (server time of the last renewal this
// hub saw + TTL), the stream's last sequence (StreamLast), and for the
// partitions this hub owns the last sequence it applied (Applied) and the
// lag between them.
func (v *View) Status() hubapi.ClusterStatus {
	st := v.m.Leases()
	ms := members(st)
	out := hubapi.ClusterStatus{Self: st.HubID, Partitions: len(st.Partitions),
		Hubs: make([]hubapi.ClusterHub, len(ms)), PartitionStates: make([]hubapi.ClusterPartition, len(st.Partitions))}
	for i, m := range ms {
		out.Hubs[i] = hubapi.ClusterHub{ID: m.ID, BaseURL: m.BaseURL, Owned: slices.Sorted(maps.Keys(m.Owned))}
	}
	last, lastKnown := v.streamLast()
	var applied map[int]uint64
	if v.o.Applied != nil {
		applied = v.o.Applied()
	}
	for p, ps := range st.Partitions {
		cp := hubapi.ClusterPartition{Partition: p}
		if ps.Owner != "" && (ps.Owner != st.HubID || ps.Mine) {
			cp.Owner, cp.Epoch, cp.LeaseExpiry = ps.Owner, ps.Epoch, ps.Expires
		}
		if p < len(last) && lastKnown[p] {
			cp.StreamLast = ptr(last[p])
		}
		if a, ok := applied[p]; ok && ps.Mine {
			cp.Applied = ptr(a)
			if cp.StreamLast != nil {
				cp.Lag = ptr(*cp.StreamLast - min(a, *cp.StreamLast))
			}
		}
		out.PartitionStates[p] = cp
	}
	return out
}

func ptr(x uint64) *uint64 { return &x }

// streamLast returns every partition's last stream sequence and whether
// it is known, reading them again when the last reads are older than
// StreamLastMaxAge (one reader at a time; the others wait and share).
func (v *View) streamLast() ([]uint64, []bool) {
	if v.o.StreamLast == nil {
		return nil, nil
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.last != nil && time.Since(v.readAt) < v.o.StreamLastMaxAge {
		return v.last, v.lastKnow
	}
	n := v.m.Partitions()
	last, known := make([]uint64, n), make([]bool, n)
	ctx, cancel := context.WithTimeout(context.Background(), v.o.StatusTimeout)
	defer cancel()
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(streamReaders, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range next {
				if s, err := v.o.StreamLast(ctx, p); err == nil {
					last[p], known[p] = s, true
				}
			}
		}()
	}
feed:
	for p := range n {
		select {
		case next <- p:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	v.last, v.lastKnow, v.readAt = last, known, time.Now()
	return last, known
}
