package hub

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go/jetstream"

	"edgeflow/hub/cluster"
	"edgeflow/hub/natsbus"
	"edgeflow/hub/natslog"
)

// clusterMode is the hub's share of cluster mode (Options.NATS): the NATS
// transport, the stream, one reader per partition and the stream's
// health. One hub owns every partition.
type clusterMode struct {
	cluster.Stream                // the transport, the stream and its health
	from           map[int]uint64 // each partition's committed position, loaded at start
	cancel         context.CancelFunc
	wg             sync.WaitGroup
	snap           clusterSnap     // state snapshots (cluster_snapshot.go)
	bf             clusterBackfill // the local log's backfill after a restore (cluster_backfill.go)
	attrs          clusterAttrs    // attribute writes awaiting their apply (cluster_attrs.go)
	// appliedMsgs counts, per partition, the messages applied since its
	// last partition checkpoint (own.go).
	appliedMsgs []atomic.Uint64
}

// loadLogPositions reads each partition's committed position from the
// store (cluster mode; after recovery, before the pipeline runs) and
// gives the committer the gauge it updates.
func (s *Server) loadLogPositions() error {
	if !s.opts.NATS.Enabled() {
		return nil
	}
	pos, err := s.st.LoadLogPositions(s.opts.NATS.Log.Stream)
	if err != nil {
		return err
	}
	for p, seq := range pos {
		if p < 0 || p >= s.opts.NATS.Log.Partitions {
			return fmt.Errorf("hub store %s holds a position of partition %d of stream %s, which has %d partitions: the data directory belongs to another stream layout", s.st.Dir, p, s.opts.NATS.Log.Stream, s.opts.NATS.Log.Partitions)
		}
		s.clm.Position.WithLabelValues(strconv.Itoa(p)).Set(float64(seq))
	}
	s.cl.from = pos
	s.cl.CatchUp.Init(s.opts.NATS.Log.Partitions, pos, s.clm.CatchUpLag)
	s.cl.snap.applied = maps.Clone(pos) // the recovered state covers exactly the committed positions
	s.com.posGauge = s.clm.Position
	return nil
}

// dialNATS creates the NATS transport (cluster mode).
func (s *Server) dialNATS() error {
	bus, err := natsbus.Dial(s.opts.busOptions())
	if err != nil {
		return fmt.Errorf("cluster mode: %w", err)
	}
	s.tr = bus
	s.cl.SetBus(bus)
	return nil
}

// startCluster ensures the stream, retrying while NATS or the stream's
// quorum is unreachable, then takes partition leases (a reader runs per
// partition this hub owns, own.go) and starts the fullness poll. A stream whose layout differs (another partition count)
// fails the start with natslog's error, which says what the stream has.
func (s *Server) startCluster(ctx context.Context) error {
	if s.cl == nil {
		return nil
	}
	js, err := jetstream.New(s.cl.Bus().Conn())
	if err != nil {
		return fmt.Errorf("cluster mode: %w", err)
	}
	l, err := s.cl.Ensure(ctx, js, s.opts.NATS.Log)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithCancel(context.Background())
	s.cl.cancel = cancel
	if err := s.startBackfill(rctx, l); err != nil {
		return err
	}
	if err := s.startOwnership(ctx, js, l); err != nil {
		return err
	}
	s.cl.wg.Add(3)
	go func() { defer s.cl.wg.Done(); s.cl.CatchUp.ReadTargets(rctx, l, s.opts.PublishTimeout) }()
	go func() { defer s.cl.wg.Done(); s.cl.Poll(rctx, l) }()
	go func() { defer s.cl.wg.Done(); s.snapshotLoop(rctx, js, l) }()
	s.log.Info("cluster mode: reading the stream", "stream", s.opts.NATS.Log.Stream, "partitions", s.opts.NATS.Log.Partitions,
		"resumed_partitions", len(s.cl.from))
	return nil
}

// readPartition feeds partition p's messages from sequence from on into
// the pipeline until ctx ends (cluster.Reader reopens its reader after a
// failure). All of a partition's messages go through one decode worker,
// so they reach the committer in stream order and its position is never
// ahead of a message not yet committed. A message's server time is the
// time the stream stored it, so a replay of the stream decides as the
// first reading did.
func (s *Server) readPartition(ctx context.Context, l *natslog.Log, p int, from, gen uint64) {
	worker := s.workers[p%len(s.workers)]
	r := cluster.Reader{Log: l, Timeout: s.opts.PublishTimeout, Metrics: s.clm,
		Report:  func(msg string, err error) { s.rejLog.log(s.log, "stream", "", msg, err) },
		Skipped: func(seq, after uint64) { s.cl.CatchUp.Skipped(p, seq, after) },
		Deliver: func(m natslog.Message) {
			s.enqueue(func() {
				worker <- inMsg{device: m.Device, payload: m.Data, serverTimeNs: m.Stored.UnixNano(), logPart: m.Partition, logSeq: m.Seq,
					logGen: gen, streamKind: m.Kind, streamID: m.ID}
			})
		}}
	r.ReadPartition(ctx, p, from)
}

// stopCluster stops the readers and the poll; the pipeline still runs and
// takes what they handed it.
func (s *Server) stopCluster() {
	if s.cl == nil || s.cl.cancel == nil {
		return
	}
	s.cl.cancel()
	s.cl.wg.Wait()
}

// NotReadyReason says why Ready is false ("" when it is true), for
// GET /readyz.
func (s *Server) NotReadyReason() string {
	switch {
	case s.cl != nil && s.cl.Restoring() != "":
		return s.cl.Restoring()
	case !s.recovered.Load():
		return "recovering the local state"
	case s.cl != nil && s.cl.NotReady() != "":
		return s.cl.NotReady()
	case !s.ready.Load():
		return "starting or shutting down"
	case s.tr == nil || !s.tr.Connected():
		return "broker not connected"
	}
	return ""
}
