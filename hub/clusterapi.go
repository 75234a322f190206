package hub

import (
	"context"
	"errors"
	"sync"

	"edgeflow/hub/api"
	"edgeflow/hub/clusterview"
	"edgeflow/hub/hubapi"
	"edgeflow/hub/natslog"
)

// clusterAPI is the api.Cluster of a cluster-mode hub: the lease view
// (clusterview) once the hub's lease manager has opened. The API is built
// before the stream and the lease bucket are reachable; until then the
// view has no members, so fleet-wide answers wait (http-cluster-wait) and
// then name every partition missing, and GET /v1/cluster shows no owner.
type clusterAPI struct {
	s    *Server
	mu   sync.Mutex
	view *clusterview.View
}

var _ api.Cluster = (*clusterAPI)(nil)

// current is the lease view, nil while the lease manager is not open.
func (c *clusterAPI) current() *clusterview.View {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.view != nil {
		return c.view
	}
	m := c.s.LeaseManager()
	if m == nil {
		return nil
	}
	v, err := clusterview.New(m, clusterview.Options{Applied: c.s.AppliedPositions, StreamLast: c.streamLast,
		Holders: c.s.HistoryHolders})
	if err != nil {
		return nil // only invalid options fail, and these are the defaults
	}
	c.view = v
	return v
}

func (c *clusterAPI) streamLast(ctx context.Context, p int) (uint64, error) {
	l := c.s.cl.Log()
	if l == nil {
		return 0, errors.New("the stream is not open yet")
	}
	return l.PartitionLastSeq(ctx, p)
}

// Self is this hub's id (hub-id).
func (c *clusterAPI) Self() string { return c.s.opts.HubID }

// Members are the lease view's hubs; none before the manager opens.
func (c *clusterAPI) Members() []api.Member {
	if v := c.current(); v != nil {
		return v.Members()
	}
	return nil
}

// HistoryHolders are the lease view's (Server.HistoryHolders: the hubs the
// partition's checkpoints name as holding its earlier events); none
// before the manager opens, when this hub owns no partition to ask for.
func (c *clusterAPI) HistoryHolders(p int) []string {
	if v := c.current(); v != nil {
		return v.HistoryHolders(p)
	}
	return nil
}

// Partitions is the stream's partition count.
func (c *clusterAPI) Partitions() int { return c.s.opts.NATS.Log.Partitions }

// PartitionOf is the partition the stream stores device's batches in.
func (c *clusterAPI) PartitionOf(device string) int {
	return natslog.PartitionOf(device, c.s.opts.NATS.Log.Partitions)
}

// Status is GET /v1/cluster: the lease view's, or every partition
// without an owner before the manager opens.
func (c *clusterAPI) Status() hubapi.ClusterStatus {
	if v := c.current(); v != nil {
		return v.Status()
	}
	st := hubapi.ClusterStatus{Self: c.Self(), Partitions: c.Partitions(), Hubs: []hubapi.ClusterHub{}}
	for p := range st.Partitions {
		st.PartitionStates = append(st.PartitionStates, hubapi.ClusterPartition{Partition: p})
	}
	return st
}

// advertiseURL is the base URL this hub's heartbeat advertises to the
// other hubs: http-advertise-url, or else one derived from the address the
// API listens on (clusterview.AdvertiseURL). A hub without one still owns
// partitions; the other hubs then cannot ask it, and report its
// partitions missing, which the warning says.
func (s *Server) advertiseURL() string {
	if s.opts.HTTPAdvertiseURL != "" {
		return s.opts.HTTPAdvertiseURL
	}
	addr := s.HTTPAddr()
	if addr == "" {
		addr = s.opts.HTTPAddr
	}
	u, err := clusterview.AdvertiseURL(addr, s.opts.HTTPTLSCertFile != "")
	if err != nil {
		s.log.Warn("cluster mode: this hub advertises no API URL; the other hubs cannot ask it and report its partitions missing (set http-advertise-url)", "err", err)
		return ""
	}
	return u
}
