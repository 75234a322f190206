package hub

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"edgeflow/hub/cluster"
	"edgeflow/hub/natsbus"
	"edgeflow/hub/natslog"
)

// clusterMode is the hub's share of cluster mode (Options.NATS): the NATS
// transport, the stream, one reader per partition and the stream's
// health. One hub owns every partition.
type clusterMode struct {
	bus       atomic.Pointer[natsbus.Bus]
	log       atomic.Pointer[natslog.Log] // set once EnsureStream succeeded
	streamErr atomic.Pointer[string]      // the last failure to reach the stream; nil: reachable
	from      map[int]uint64              // each partition's committed position, loaded at start
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	snap      clusterSnap // state snapshots (cluster_snapshot.go)
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
	s.cl.bus.Store(bus)
	return nil
}

// startCluster ensures the stream, retrying while NATS or the stream's
// quorum is unreachable, then starts one reader per partition and the
// fullness poll. A stream whose layout differs (another partition count)
// fails the start with natslog's error, which says what the stream has.
func (s *Server) startCluster(ctx context.Context) error {
	if s.cl == nil {
		return nil
	}
	js, err := jetstream.New(s.cl.bus.Load().Conn())
	if err != nil {
		return fmt.Errorf("cluster mode: %w", err)
	}
	l, err := s.ensureStream(ctx, js)
	if err != nil {
		return err
	}
	s.cl.log.Store(l)
	s.cl.streamErr.Store(nil)
	rctx, cancel := context.WithCancel(context.Background())
	s.cl.cancel = cancel
	for p := range s.opts.NATS.Log.Partitions {
		s.cl.wg.Add(1)
		go func() { defer s.cl.wg.Done(); s.readPartition(rctx, l, p, s.cl.from[p]+1) }()
	}
	s.cl.wg.Add(2)
	go func() { defer s.cl.wg.Done(); s.pollStream(rctx, l) }()
	go func() { defer s.cl.wg.Done(); s.snapshotLoop(rctx, js, l) }()
	s.log.Info("cluster mode: reading the stream", "stream", s.opts.NATS.Log.Stream, "partitions", s.opts.NATS.Log.Partitions,
		"resumed_partitions", len(s.cl.from))
	return nil
}

// ensureStream runs natslog.EnsureStream until it succeeds, fails for a
// reason a retry cannot fix, or ctx ends.
func (s *Server) ensureStream(ctx context.Context, js jetstream.JetStream) (*natslog.Log, error) {
	for delay := 100 * time.Millisecond; ; delay = min(2*delay, 5*time.Second) {
		actx, cancel := context.WithTimeout(ctx, s.opts.PublishTimeout)
		l, err := natslog.EnsureStream(actx, js, s.opts.NATS.Log)
		cancel()
		switch {
		case err == nil:
			return l, nil
		case errors.Is(err, natslog.ErrPartitionsChanged), errors.Is(err, natslog.ErrStreamMismatch), errors.Is(err, natslog.ErrInvalidOption):
			return nil, fmt.Errorf("cluster mode: %w", err)
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("cluster mode: stopped while waiting for stream %s: %w", s.opts.NATS.Log.Stream, ctx.Err())
		}
		msg := err.Error()
		s.cl.streamErr.Store(&msg)
		s.log.Warn("cluster mode: stream not reachable yet; retrying", "stream", s.opts.NATS.Log.Stream, "err", err)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("cluster mode: stopped while waiting for stream %s: %w (last error: %v)", s.opts.NATS.Log.Stream, ctx.Err(), err)
		case <-time.After(delay):
		}
	}
}

// readPartition feeds partition p's messages from sequence from on into
// the pipeline until ctx ends (cluster.Reader reopens its reader after a
// failure). All of a partition's messages go through one decode worker,
// so they reach the committer in stream order and its position is never
// ahead of a message not yet committed. A message's server time is the
// time the stream stored it, so a replay of the stream decides as the
// first reading did.
func (s *Server) readPartition(ctx context.Context, l *natslog.Log, p int, from uint64) {
	worker := s.workers[p%len(s.workers)]
	r := cluster.Reader{Log: l, Timeout: s.opts.PublishTimeout, Metrics: s.clm,
		Report: func(msg string, err error) { s.rejLog.log(s.log, "stream", "", msg, err) },
		Deliver: func(m natslog.Message) {
			s.enqueue(func() {
				worker <- inMsg{device: m.Device, payload: m.Data, serverTimeNs: m.Stored.UnixNano(), logPart: m.Partition, logSeq: m.Seq}
			})
		}}
	r.ReadPartition(ctx, p, from)
}

// pollStream updates the stream's gauges and reachability every
// cluster.PollInterval until ctx ends.
func (s *Server) pollStream(ctx context.Context, l *natslog.Log) {
	t := time.NewTicker(cluster.PollInterval)
	defer t.Stop()
	for {
		actx, cancel := context.WithTimeout(ctx, s.opts.PublishTimeout)
		f, err := l.Fullness(actx)
		cancel()
		switch {
		case err != nil && ctx.Err() == nil:
			s.streamDown(err.Error())
		case err == nil && !f.Quorum():
			s.streamDown(fmt.Sprintf("only %d of its %d replicas are current (no quorum: writes are refused)", f.Current, f.Replicas))
		case err == nil:
			s.cl.streamErr.Store(nil)
			s.clm.Up.Set(1)
			s.clm.Bytes.Set(float64(f.Bytes))
			s.clm.MaxBytes.Set(float64(f.MaxBytes))
			s.clm.Fullness.Set(f.Ratio())
			s.clm.LastSeq.Set(float64(f.LastSeq))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// streamDown records why the stream is unavailable.
func (s *Server) streamDown(why string) {
	s.cl.streamErr.Store(&why)
	s.clm.Up.Set(0)
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

// clusterNotReady says why cluster mode keeps the hub from being ready:
// NATS disconnected, or the stream not ensured or not answering. "" when
// not in cluster mode or all is well.
func (s *Server) clusterNotReady() string {
	if s.cl == nil {
		return ""
	}
	switch {
	case s.cl.bus.Load() == nil || !s.cl.bus.Load().Connected():
		return "NATS not connected"
	case s.cl.log.Load() == nil:
		if e := s.cl.streamErr.Load(); e != nil {
			return "NATS stream " + s.opts.NATS.Log.Stream + " not reachable: " + *e
		}
		return "NATS stream " + s.opts.NATS.Log.Stream + " not ensured yet"
	}
	if e := s.cl.streamErr.Load(); e != nil {
		return "NATS stream " + s.opts.NATS.Log.Stream + " unavailable: " + *e
	}
	return ""
}

// NotReadyReason says why Ready is false ("" when it is true), for
// GET /readyz.
func (s *Server) NotReadyReason() string {
	switch {
	case s.cl != nil && s.cl.snap.waiting.Load() != nil:
		return *s.cl.snap.waiting.Load()
	case !s.recovered.Load():
		return "recovering the local state"
	case s.cl != nil && s.clusterNotReady() != "":
		return s.clusterNotReady()
	case !s.ready.Load():
		return "starting or shutting down"
	case s.tr == nil || !s.tr.Connected():
		return "broker not connected"
	}
	return ""
}
