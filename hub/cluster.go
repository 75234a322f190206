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
	"github.com/prometheus/client_golang/prometheus"

	"edgeflow/hub/natsbus"
	"edgeflow/hub/natslog"
)

// cluster is the hub's share of cluster mode (Options.NATS): the NATS
// transport, the stream, one reader per partition and the stream's
// health. One hub owns every partition.
type cluster struct {
	bus       atomic.Pointer[natsbus.Bus]
	log       atomic.Pointer[natslog.Log] // set once EnsureStream succeeded
	streamErr atomic.Pointer[string]      // the last failure to reach the stream; nil: reachable
	from      map[int]uint64              // each partition's committed position, loaded at start
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	snap      clusterSnap // state snapshots (cluster_snapshot.go)
}

// clusterMetrics are cluster mode's series. They are registered in every
// mode (the alert rules name them) and stay zero without NATS.
type clusterMetrics struct {
	bytes, maxBytes, fullness, lastSeq, up prometheus.Gauge
	position                               *prometheus.GaugeVec // by partition: last sequence committed here
	badMessages, readErrors                prometheus.Counter
	snap                                   *snapshotMetrics
}

// newClusterMetrics creates and registers cluster mode's metrics.
func newClusterMetrics(reg prometheus.Registerer) (*clusterMetrics, error) {
	g := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "edgeflow", Subsystem: "hub", Name: name, Help: help})
	}
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "edgeflow", Subsystem: "hub", Name: name, Help: help})
	}
	m := &clusterMetrics{
		bytes:    g("stream_bytes", "Cluster mode: bytes the NATS JetStream log stream holds (polled every few seconds)."),
		maxBytes: g("stream_max_bytes", "Cluster mode: the stream's byte limit (nats-max-bytes); at it the stream refuses new batches."),
		fullness: g("stream_fullness_ratio", "Cluster mode: stream_bytes / stream_max_bytes."),
		lastSeq:  g("stream_last_seq", "Cluster mode: the stream's last sequence."),
		up:       g("stream_up", "Cluster mode: 1 while the last poll of the stream succeeded."),
		position: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "edgeflow", Subsystem: "hub", Name: "stream_position",
			Help: "Cluster mode: the last stream sequence of each partition committed by this hub."}, []string{"partition"}),
		badMessages: c("stream_bad_messages_total", "Cluster mode: stream messages skipped because their subject names no valid device."),
		readErrors:  c("stream_read_errors_total", "Cluster mode: failures to open or read a partition's reader (each is retried)."),
	}
	for _, col := range []prometheus.Collector{m.bytes, m.maxBytes, m.fullness, m.lastSeq, m.up, m.position, m.badMessages, m.readErrors} {
		if err := reg.Register(col); err != nil {
			return nil, err
		}
	}
	var err error
	m.snap, err = newSnapshotMetrics(reg)
	return m, err
}

// loadLogPositions reads each partition's committed position from the
// store (cluster mode; after recovery, before the pipeline runs) and
// gives the committer the gauge it updates.
func (s *Server) loadLogPositions() error {
	if !s.opts.NATS.enabled() {
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
		s.clm.position.WithLabelValues(strconv.Itoa(p)).Set(float64(seq))
	}
	s.cl.from = pos
	s.cl.snap.applied = maps.Clone(pos) // the recovered state covers exactly the committed positions
	s.com.posGauge = s.clm.position
	return nil
}

// dialNATS creates the NATS transport (cluster mode).
func (s *Server) dialNATS() error {
	bus, err := natsbus.Dial(s.opts.NATS.busOptions(&s.opts))
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
// the pipeline until ctx ends, reopening its reader after a failure. All
// of a partition's messages go through one decode worker, so they reach
// the committer in stream order and its position is never ahead of a
// message not yet committed. A message's server time is the time the
// stream stored it, so a replay of the stream decides as the first
// reading did.
func (s *Server) readPartition(ctx context.Context, l *natslog.Log, p int, from uint64) {
	worker := s.workers[p%len(s.workers)]
	for delay := 100 * time.Millisecond; ctx.Err() == nil; {
		actx, cancel := context.WithTimeout(ctx, s.opts.PublishTimeout)
		r, err := l.Reader(actx, p, from)
		cancel()
		if err != nil {
			s.clm.readErrors.Inc()
			s.rejLog.log(s.log, "stream", "", "cluster mode: opening a partition's reader failed; retrying", err)
			select {
			case <-ctx.Done():
			case <-time.After(delay):
			}
			delay = min(2*delay, 5*time.Second)
			continue
		}
		delay = 100 * time.Millisecond
		from = s.readUntilError(ctx, r, worker, from)
		r.Close()
	}
}

// readUntilError hands r's messages to worker until r fails or ctx ends
// and returns the sequence to resume from.
func (s *Server) readUntilError(ctx context.Context, r *natslog.Reader, worker chan<- inMsg, from uint64) uint64 {
	for {
		m, err := r.Next(ctx)
		if errors.Is(err, natslog.ErrBadSubject) {
			s.clm.badMessages.Inc()
			s.rejLog.log(s.log, "stream", "", "cluster mode: skipped a stream message", err)
			from = m.Seq + 1
			continue
		}
		if err != nil {
			if ctx.Err() == nil {
				s.clm.readErrors.Inc()
				s.rejLog.log(s.log, "stream", "", "cluster mode: reading a partition failed; reopening it", err)
			}
			return from
		}
		from = m.Seq + 1
		s.enqueue(func() {
			worker <- inMsg{device: m.Device, payload: m.Data, serverTimeNs: m.Stored.UnixNano(), logPart: m.Partition, logSeq: m.Seq}
		})
	}
}

// pollStream updates the stream's gauges and reachability every
// clusterPollInterval until ctx ends.
func (s *Server) pollStream(ctx context.Context, l *natslog.Log) {
	t := time.NewTicker(clusterPollInterval)
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
			s.clm.up.Set(1)
			s.clm.bytes.Set(float64(f.Bytes))
			s.clm.maxBytes.Set(float64(f.MaxBytes))
			s.clm.fullness.Set(f.Ratio())
			s.clm.lastSeq.Set(float64(f.LastSeq))
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
	s.clm.up.Set(0)
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
