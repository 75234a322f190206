package hub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"edgeflow/aggregate"
	"edgeflow/hub/attrs"
	"edgeflow/hub/hublog"
	"edgeflow/hub/lease"
	"edgeflow/hub/natslog"
	"edgeflow/hub/registry"
)

// ownership is cluster mode's share of the stream's partitions among
// several hubs (docs/CLUSTER.md, "Several hubs"): a lease.Manager decides
// which partitions this hub owns, a reader runs for each owned one, and
// each owned partition's position and devices' state are saved, fenced by
// the lease's epoch, in natslog.PartitionCheckpoints, where the next owner
// takes them from.
//
// Every ownership change runs on one goroutine (tasks), in the order the
// manager reported them. Each partition has a generation, bumped at every
// change: a reader stamps the messages it hands over with the generation
// it was started under, and the committer and the applier discard a
// message whose partition has moved on since (stale).
type ownership struct {
	mgr    *lease.Manager
	mgrPub atomic.Pointer[lease.Manager] // mgr, for readers outside the start (LeaseManager)
	ckpts  *natslog.PartitionCheckpoints
	l      *natslog.Log
	n      int
	gen    []atomic.Uint64
	// skipped marks a partition of which the applier skipped a message
	// the committer had logged (stale after commit): the committer's dedup
	// state and position are then ahead of the applied state, which
	// therefore cannot be kept (lose).
	skipped []atomic.Bool
	m       *ownMetrics
	ckptMax int // tests: the checkpoints' MaxBytes (0: natslog's default)

	qmu   sync.Mutex
	queue []func()
	wake  chan struct{}

	// Only the task goroutine touches parts.
	parts []ownPart

	// holders[p] are the hubs whose local logs hold partition p's events
	// (partCkpt.holders), as this hub last read them from a checkpoint of
	// p or wrote them into one; GET /v1/events asks them (HistoryHolders).
	hmu     sync.Mutex
	holders []map[string]int64

	// stopping: the hub is shutting down; a handoff keeps the
	// partition's state and position, which a restart of this hub
	// compares with the checkpoint it just saved.
	stopping atomic.Bool
	ctx      context.Context // ends when the hub stops its readers
	cancel   context.CancelFunc
	runCtx   context.CancelFunc // ends the manager's Run without handover (tests: a crash)
	wg       sync.WaitGroup
	runWG    sync.WaitGroup
	stop     chan struct{}
}

// ownPart is one partition's ownership, as the task goroutine knows it.
type ownPart struct {
	owned    bool
	epoch    uint64
	cancel   context.CancelFunc // its reader's
	done     chan struct{}      // closed when its reader has returned
	local    bool               // this hub holds its devices' state (recovered, or imported)
	lastSave time.Time
	savedPos uint64
	// lastCheck: when settleOthers last read the owner's checkpoint.
	lastCheck time.Time
}

// ownMetrics are the ownership's counters (the lease package has the
// partitions owned, takeover times and fenced writes).
type ownMetrics struct {
	takeovers  *prometheus.CounterVec // by how the state was taken: checkpoint, local, stream
	handoffs   prometheus.Counter
	saves      *prometheus.CounterVec // by result
	drops      *prometheus.CounterVec // by reason: lost, fenced, handoff
	dropped    prometheus.Counter     // devices dropped
	discarded  prometheus.Counter     // messages committed before a loss, not applied
	ckptErrors *prometheus.CounterVec // unreadable checkpoints, failed imports
}

func newOwnMetrics(reg prometheus.Registerer) (*ownMetrics, error) {
	m := &ownMetrics{
		takeovers: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edgeflow_hub_partition_takeovers_total",
			Help: "Partitions this hub started applying, by where its state came from: checkpoint (another owner's, imported), local (this hub's own, at or ahead of the checkpoint), stream (no state: read from the stream's start)."}, []string{"from"}),
		handoffs: prometheus.NewCounter(prometheus.CounterOpts{Name: "edgeflow_hub_partition_handoffs_total",
			Help: "Partitions this hub handed over cleanly (final checkpoint saved, then released)."}),
		saves: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edgeflow_hub_partition_checkpoint_saves_total",
			Help: "Fenced partition checkpoint saves, by result: ok, fenced (another owner claimed the partition), too_large, error."}, []string{"result"}),
		drops: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edgeflow_hub_partition_drops_total",
			Help: "Partitions whose devices' state this hub dropped, by reason: lost (lease), fenced (a checkpoint save refused), handoff, not_owned (recovered state of a partition another hub owns, once its checkpoint is at or past it)."}, []string{"reason"}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "edgeflow_hub_partition_dropped_devices_total",
			Help: "Devices whose state this hub dropped with their partition (registry entries)."}),
		discarded: prometheus.NewCounter(prometheus.CounterOpts{Name: "edgeflow_hub_partition_discarded_messages_total",
			Help: "Stream messages in the pipeline when their partition was lost, discarded instead of applied."}),
		ckptErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edgeflow_hub_partition_checkpoint_errors_total",
			Help: "Partition checkpoints that could not be used, by what: unreadable (corrupt or not loaded), import (refused by the engine or registry), claim."}, []string{"what"}),
	}
	for _, c := range []prometheus.Collector{m.takeovers, m.handoffs, m.saves, m.drops, m.dropped, m.discarded, m.ckptErrors} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// devicesHandover is what a ClockEstimator implements to move devices
// between hubs (clockest.DeviceClocks does).
type devicesHandover interface {
	ExportDevices(keep func(device string) bool) ([]byte, error)
	ImportDevices(data []byte) error
	DropDevices(keep func(device string) bool) int
}

// partitionKeep selects the devices of partition p of n.
func partitionKeep(p, n int) func(string) bool {
	return func(dev string) bool { return natslog.PartitionOf(dev, n) == p }
}

// bucketName is the stream's own bucket of kind suffix (EDGEFLOW_LEASES,
// EDGEFLOW_PARTITION_CHECKPOINTS for the default stream), or def when the
// name would be too long.
func bucketName(stream, suffix, def string) string {
	if b := stream + "_" + suffix; len(b) <= 64 && stream != "" {
		return b
	}
	return def
}

// startOwnership opens the partition checkpoints and the lease manager
// and runs it; the manager's Acquired callbacks start the readers. Open
// waits TTL/2 + Renew when the hub's id was announced before (a restart,
// or a duplicate id), which is the start-up delay leases add.
func (s *Server) startOwnership(ctx context.Context, js jetstream.JetStream, l *natslog.Log) error {
	o := s.own
	o.l = l
	o.ctx, o.cancel = context.WithCancel(context.Background())
	for p := range o.parts {
		_, o.parts[p].local = s.cl.from[p]
	}
	// Both buckets are opened retrying (a JetStream cluster still electing
	// leaders times the requests out); only errors a retry cannot fix stop
	// the start.
	ckptOpts := natslog.PartitionCheckpointOptions{
		Bucket:   bucketName(s.opts.NATS.Log.Stream, "PARTITION_CHECKPOINTS", natslog.DefaultPartitionCheckpointBucket),
		Replicas: s.opts.NATS.Log.Replicas, MaxBytes: o.ckptMax, Registerer: s.opts.Registerer}
	err := s.cl.Open(ctx, "the partition checkpoint bucket "+ckptOpts.Bucket, true,
		func(err error) bool { return errors.Is(err, natslog.ErrInvalidOption) },
		func(actx context.Context) (err error) {
			o.ckpts, err = natslog.OpenPartitionCheckpoints(actx, js, ckptOpts)
			return err
		})
	if err != nil {
		return fmt.Errorf("cluster mode: partition checkpoints: %w", err)
	}
	leaseOpts := lease.Options{HubID: s.opts.HubID, URL: s.advertiseURL(), Partitions: o.n, TTL: s.opts.NATS.LeaseTTL,
		Bucket: bucketName(s.opts.NATS.Log.Stream, "LEASES", lease.DefaultBucket), Replicas: s.opts.NATS.Log.Replicas,
		Logger: s.log, Registerer: s.opts.Registerer,
		Callbacks: lease.Callbacks{
			Acquired: func(p int, epoch uint64) { o.push(func() { s.acquire(p, epoch) }) },
			Lost: func(p int, epoch uint64, reason lease.Reason) {
				o.gen[p].Add(1) // nothing more of p is committed or applied from now on
				// Taken: another hub owns it; drop its state now. Otherwise
				// (renewals failed, clock, stop) keep the state, applied no
				// further, until another hub's checkpoint passes it or this
				// hub takes the partition again (settleOthers, acquire).
				o.push(func() { s.lose(p, epoch, "lost", string(reason), reason == lease.ReasonTaken) })
			},
			Handoff: func(p int, epoch uint64) {
				done := make(chan struct{})
				o.push(func() { defer close(done); s.handoff(p, epoch) })
				<-done
			},
		}}
	err = s.cl.Open(ctx, "the partition lease bucket "+leaseOpts.Bucket, false,
		func(err error) bool {
			return errors.Is(err, lease.ErrInvalidOption) || errors.Is(err, lease.ErrBucketMismatch) || errors.Is(err, lease.ErrDuplicateHub)
		},
		func(actx context.Context) (err error) {
			o.mgr, err = lease.Open(actx, js, leaseOpts)
			return err
		})
	if err != nil {
		return fmt.Errorf("cluster mode: partition leases (hub id %s): %w", s.opts.HubID, err)
	}
	o.mgrPub.Store(o.mgr)
	o.wg.Add(2)
	go func() { defer o.wg.Done(); o.runTasks() }()
	go func() { defer o.wg.Done(); s.checkpointLoop() }()
	runCtx, cancel := context.WithCancel(context.Background())
	o.runCtx = cancel
	o.runWG.Add(1)
	go func() {
		defer o.runWG.Done()
		if err := o.mgr.Run(runCtx); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, lease.ErrStopped) {
			s.log.Error("cluster mode: partition leases stopped: this hub applies no partition", "hub_id", s.opts.HubID, "err", err)
		}
	}()
	s.log.Info("cluster mode: taking partition leases", "hub_id", s.opts.HubID, "lease_ttl", s.opts.NATS.LeaseTTL)
	return nil
}

// push queues a task; it never blocks (the manager's callbacks call it).
func (o *ownership) push(fn func()) {
	o.qmu.Lock()
	o.queue = append(o.queue, fn)
	o.qmu.Unlock()
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// runTasks runs the queued tasks in order until stop is closed and the
// queue is empty.
func (o *ownership) runTasks() {
	for {
		o.qmu.Lock()
		q := o.queue
		o.queue = nil
		o.qmu.Unlock()
		for _, fn := range q {
			fn()
		}
		if len(q) > 0 {
			continue
		}
		select {
		case <-o.wake:
		case <-o.stop:
			o.qmu.Lock()
			empty := len(o.queue) == 0
			o.qmu.Unlock()
			if empty {
				return
			}
		}
	}
}

// stopOwnership hands every owned partition over (Manager.Stop: Handoff,
// final checkpoint, release) while the pipeline still runs, then stops the
// readers and the task goroutine. crash skips the handover: the leases
// are left to expire, as when the process dies.
func (s *Server) stopOwnership(crash bool) {
	o := s.own
	if o == nil || o.mgr == nil {
		return
	}
	o.stopping.Store(true)
	if crash {
		o.runCtx()
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), max(2*s.opts.NATS.LeaseTTL, 5*time.Second))
		if err := o.mgr.Stop(ctx); err != nil {
			s.log.Error("cluster mode: handing partitions over at shutdown", "err", err)
		}
		cancel()
		o.runCtx()
	}
	o.runWG.Wait()
	close(o.stop)
	o.wg.Wait()
	o.cancel()
	for p := range o.parts {
		if d := o.parts[p].done; d != nil {
			<-d
		}
	}
}

// LeaseManager returns the partition lease manager (nil outside cluster
// mode or before Start): the API layer's view of which hub owns which
// partition.
func (s *Server) LeaseManager() *lease.Manager {
	if s.own == nil {
		return nil
	}
	return s.own.mgrPub.Load()
}

// AppliedPositions returns, per partition this hub holds state of, the
// last stream sequence it applied (nil outside cluster mode), for
// GET /v1/cluster's lag.
func (s *Server) AppliedPositions() map[int]uint64 {
	if s.cl == nil {
		return nil
	}
	var out map[int]uint64
	_ = s.inApplier(func() error { out = maps.Clone(s.cl.snap.applied); return nil })
	return out
}

// acquire starts applying partition p under epoch: it claims p's
// checkpoint, takes the state from it or keeps its own (whichever is
// further along the stream), and starts p's reader after that state's
// position.
//
// Why this is exact: the state of a partition's devices is a function of
// the partition's messages up to a position (each message is decided
// against the devices' applied ranges, which travel with the state). A
// checkpoint holds the state at exactly its position; this hub's local
// state of p, when it has one, is at exactly its applied position of p.
// Either is a correct starting point, and the reader then delivers every
// message after it once; the further one replays less. Anything another
// owner applied after its last checkpoint and this hub's local position
// is applied again here from the stream, not counted twice: it is in
// neither state.
func (s *Server) acquire(p int, epoch uint64) {
	o := s.own
	start := time.Now()
	if e, ok := o.mgr.Owns(p); !ok || e != epoch {
		return // lost already; its Lost task follows
	}
	ctx, cancel := context.WithTimeout(o.ctx, s.opts.NATS.LeaseTTL/2)
	defer cancel()
	if err := o.ckpts.Claim(ctx, p, epoch); err != nil {
		// Unclaimed, a zombie's save could still land: nothing is read
		// until the claim succeeds. A fenced claim means a newer epoch
		// exists (this lease is about to be found taken); anything else
		// (NATS unreachable, a leader election) is tried again while the
		// lease holds.
		o.m.ckptErrors.WithLabelValues("claim").Inc()
		s.log.Error("cluster mode: claiming a partition's checkpoint failed: not applying it yet", "partition", p, "epoch", epoch, "err", err)
		if !errors.Is(err, natslog.ErrFenced) {
			time.AfterFunc(s.opts.NATS.LeaseTTL/4, func() { o.push(func() { s.acquire(p, epoch) }) })
		}
		return
	}
	var ck *partCkpt
	rec, err := o.ckpts.Load(ctx, p)
	switch {
	case err == nil && rec.Data != nil:
		if ck, err = decodePartCkpt(rec.Data); err != nil {
			o.m.ckptErrors.WithLabelValues("unreadable").Inc()
			s.log.Error("cluster mode: a partition's checkpoint does not decode: reading the partition from this hub's state or the stream's start", "partition", p, "err", err)
		}
	case err != nil && !errors.Is(err, natslog.ErrNoCheckpoint):
		// Claim just wrote the record, so a failed read is transient;
		// reading the stream from an older state instead could need
		// messages retention has dropped: try again while the lease holds.
		o.m.ckptErrors.WithLabelValues("unreadable").Inc()
		s.log.Error("cluster mode: reading a partition's checkpoint failed: not applying it yet", "partition", p, "err", err)
		time.AfterFunc(s.opts.NATS.LeaseTTL/4, func() { o.push(func() { s.acquire(p, epoch) }) })
		return
	}
	if ck != nil {
		o.addHolders(p, ck.holders)
	}
	var localPos uint64
	_ = s.inApplier(func() error { localPos = s.cl.snap.applied[p]; return nil })
	pt := &o.parts[p]
	from, how := uint64(1), "stream"
	switch {
	case ck != nil && (!pt.local || ck.pos > localPos):
		if err := s.importPartition(p, ck); err != nil {
			o.m.ckptErrors.WithLabelValues("import").Inc()
			s.log.Error("cluster mode: importing a partition's checkpoint failed: reading it from the stream's start", "partition", p, "err", err)
			if err := s.dropPartition(p); err != nil {
				s.log.Error("cluster mode: dropping a partition", "partition", p, "err", err)
				return
			}
			pt.local = false
		} else {
			from, how, pt.local = ck.pos+1, "checkpoint", true
		}
	case pt.local:
		from, how = localPos+1, "local"
	}
	o.skipped[p].Store(false)
	g := o.gen[p].Add(1)
	rctx, rcancel := context.WithCancel(o.ctx)
	done := make(chan struct{})
	pt.owned, pt.epoch, pt.cancel, pt.done, pt.local = true, epoch, rcancel, done, true
	pt.lastSave, pt.savedPos = time.Now(), from-1
	s.cl.appliedMsgs[p].Store(0)
	s.cl.CatchUp.Own(p, true)
	go func() { defer close(done); s.readPartition(rctx, o.l, p, from, g) }()
	o.m.takeovers.WithLabelValues(how).Inc()
	s.log.Info("cluster mode: applying partition", "partition", p, "epoch", epoch, "state_from", how, "from_seq", from,
		"took", time.Since(start).Round(time.Millisecond))
}

// stopReader stops partition p's reader and waits until it has returned:
// what it handed over is in the pipeline, nothing more comes.
func (o *ownership) stopReader(p int) {
	pt := &o.parts[p]
	if pt.cancel != nil {
		pt.cancel()
		<-pt.done
		pt.cancel, pt.done = nil, nil
	}
}

// lose ends partition p's ownership without a final checkpoint (the lease
// was lost, or a save was fenced): its generation has moved on, so what
// is in the pipeline of it is discarded, and its reader stops. With drop
// (a save fenced, the lease taken: another hub owns p) its devices are
// dropped from the committer's dedup state, the clock estimator, the
// registry and the engine (a logged KindOwn entry). Without (the lease
// not renewed in time, as while the lease bucket is unavailable; the
// hub stopping) the state stays, applied no further: whoever owns p next
// starts from its checkpoint or its own state, whichever is further, so
// keeping it loses nothing and counts nothing twice, and it spares this
// hub's consumers a replay when it takes p back itself.
func (s *Server) lose(p int, epoch uint64, reason, detail string, drop bool) {
	o := s.own
	pt := &o.parts[p]
	if pt.owned && pt.epoch != epoch {
		return // a newer ownership; this loss is of an older one
	}
	o.gen[p].Add(1)
	o.stopReader(p)
	pt.owned = false
	s.cl.CatchUp.Own(p, false)
	if !drop && !o.stopping.Load() {
		// Once everything handed over is through the pipeline: if the
		// applier skipped a message the committer logged, the committer
		// is ahead of the state kept, so the state goes.
		if err := s.barrier(p); err != nil || o.skipped[p].Load() {
			drop = true
		}
	}
	if !pt.local || !drop || o.stopping.Load() {
		s.log.Warn("cluster mode: partition no longer this hub's: stopped applying it", "partition", p, "epoch", epoch, "reason", detail)
		return
	}
	if err := s.dropPartition(p); err != nil {
		s.log.Error("cluster mode: dropping a lost partition's devices failed", "partition", p, "err", err)
		return
	}
	pt.local = false
	o.m.drops.WithLabelValues(reason).Inc()
	s.log.Warn("cluster mode: partition no longer this hub's: stopped applying it, dropped its devices", "partition", p, "epoch", epoch,
		"reason", detail)
}

// handoff ends partition p's ownership cleanly: its reader stops, what it
// handed over is applied, the final checkpoint is saved under epoch (and
// the record released), then its devices are dropped. The manager deletes
// the lease when it returns.
func (s *Server) handoff(p int, epoch uint64) {
	o := s.own
	pt := &o.parts[p]
	if !pt.owned || pt.epoch != epoch {
		return
	}
	start := time.Now()
	o.stopReader(p)
	if err := s.barrier(p); err != nil {
		s.log.Error("cluster mode: handing a partition over: the pipeline stopped", "partition", p, "err", err)
	} else if err := s.savePartition(p, epoch, true); !pt.owned {
		return // fenced: lose dropped it
	} else if err == nil {
		ctx, cancel := context.WithTimeout(o.ctx, s.opts.NATS.LeaseTTL/4)
		if err := o.ckpts.Release(ctx, p, epoch); err != nil && !errors.Is(err, natslog.ErrFenced) {
			s.log.Warn("cluster mode: releasing a partition's checkpoint", "partition", p, "err", err)
		}
		cancel()
	}
	o.gen[p].Add(1)
	pt.owned = false
	s.cl.CatchUp.Own(p, false)
	if o.stopping.Load() {
		o.m.handoffs.Inc()
		s.log.Info("cluster mode: handed partition over at shutdown, its state kept", "partition", p, "epoch", epoch, "took", time.Since(start).Round(time.Millisecond))
		return
	}
	if err := s.dropPartition(p); err != nil {
		s.log.Error("cluster mode: dropping a handed-over partition's devices failed", "partition", p, "err", err)
	} else {
		pt.local = false
		o.m.drops.WithLabelValues("handoff").Inc()
	}
	o.m.handoffs.Inc()
	s.log.Info("cluster mode: handed partition over", "partition", p, "epoch", epoch, "took", time.Since(start).Round(time.Millisecond))
}

// barrier returns once everything partition p's worker was handed before
// it has been committed and applied.
func (s *Server) barrier(p int) error {
	b := &pending{barrier: true, applied: make(chan error, 1)}
	return s.sendCtl(p, b)
}

// sendCtl hands a control pending to partition p's worker and waits for
// the applier's answer (errNotLogged for a barrier).
func (s *Server) sendCtl(p int, c *pending) error {
	sent := false
	s.enqueue(func() { s.workers[p%len(s.workers)] <- inMsg{ctl: c}; sent = true })
	if !sent {
		return errors.New("the hub is closing")
	}
	select {
	case err := <-c.applied:
		if c.barrier && errors.Is(err, errNotLogged) {
			return nil
		}
		return err
	case <-s.applyDone:
		return errors.New("the hub's applier stopped")
	}
}

// dropPartition logs and applies a KindOwn entry dropping partition p's
// devices.
func (s *Server) dropPartition(p int) error {
	rec := &ownRecord{op: ownDrop, part: p}
	return s.sendCtl(p, &pending{kind: hublog.KindOwn, serverTimeNs: s.opts.Now().UnixNano(), payload: rec.encode(), own: rec, applied: make(chan error, 1)})
}

// importPartition logs and applies a KindOwn entry replacing partition
// p's devices with a checkpoint's. The registry and attribute exports are
// checked first, so the committer's dedup state never takes what the
// applier refuses.
func (s *Server) importPartition(p int, ck *partCkpt) error {
	if err := registry.New(s.opts.MaxStreamsPerDevice).ImportDevices(ck.reg); err != nil {
		return err
	}
	if ck.hasAttrs && s.attrs != nil {
		if err := s.attrs.CheckExport(partitionKeep(p, s.opts.NATS.Log.Partitions), ck.attrs); err != nil {
			return fmt.Errorf("attribute versions: %w", err)
		}
	}
	if !ck.hasAttrs {
		s.log.Warn("cluster mode: a partition checkpoint written by an older build carries no attribute versions: this hub has none for the partition's devices until they are written again (attr.* joins leave them out)",
			"partition", p, "position", ck.pos)
	}
	rec := &ownRecord{op: ownImport, part: p, ckpt: ck}
	return s.sendCtl(p, &pending{kind: hublog.KindOwn, serverTimeNs: s.opts.Now().UnixNano(), payload: rec.encode(), own: rec, applied: make(chan error, 1)})
}

// applyOwn is the committer's part of a KindOwn entry: it forgets the
// partition's streams and clock estimates and, for an import, takes the
// checkpoint's (the registry's applied and refused ranges are the dedup
// state), returning the ranges and position keys to write with the entry.
func (c *committer) applyOwn(r *ownRecord) []kv {
	n := c.opts.NATS.Log.Partitions
	keep := partitionKeep(r.part, n)
	var kvs []kv
	for k := range c.streams {
		if keep(k.Device) {
			kvs = append(kvs, kv{k: hublog.RangesKey(k.Device, k.ID), del: true})
			delete(c.streams, k)
		}
	}
	for dev := range c.cap.byDevice {
		if keep(dev) {
			delete(c.cap.byDevice, dev)
		}
	}
	est, _ := c.estimator.(devicesHandover)
	if est != nil {
		est.DropDevices(keep)
	}
	posKey := hublog.LogPositionKey(c.opts.NATS.Log.Stream, r.part)
	if r.op == ownImport {
		tmp := registry.New(c.opts.MaxStreamsPerDevice)
		if err := tmp.ImportDevices(r.ckpt.reg); err == nil { // checked before it was sent
			for k, st := range tmp.DedupStates() {
				if keep(k.Device) {
					c.streams[k] = st
					c.indexStream(k, st)
					kvs = append(kvs, kv{k: hublog.RangesKey(k.Device, k.ID), v: hublog.EncodeDedup(st)})
				}
			}
		}
		if est != nil && len(r.ckpt.clock) > 0 {
			if err := est.ImportDevices(r.ckpt.clock); err != nil {
				c.opts.Logger.Warn("cluster mode: a partition checkpoint's clock estimates do not import; the estimator starts over for its devices", "partition", r.part, "err", err)
			}
		}
		kvs = append(kvs, kv{k: posKey, v: hublog.EncodeLogPosition(r.ckpt.pos)})
	} else {
		kvs = append(kvs, kv{k: posKey, del: true})
	}
	c.m.streams.Set(float64(len(c.streams)))
	return kvs
}

// applyOwnEntry is the applier's part of a KindOwn entry (applyOwnTo),
// and the partition's applied position follows.
func (s *Server) applyOwnEntry(e *hublog.Entry) error {
	if s.cl == nil {
		return fmt.Errorf("%w: log entry %d: a partition ownership entry outside cluster mode", hublog.ErrCorrupt, e.Seq)
	}
	var eng *aggregate.Engine
	if s.agg != nil {
		eng = s.agg.eng
	}
	r, dropped, err := applyOwnTo(s.reg, eng, s.attrs, e, s.opts.NATS.Log.Partitions, s.log)
	if err != nil {
		return err
	}
	if s.own != nil {
		s.own.m.dropped.Add(float64(dropped))
	}
	if s.cl.snap.applied == nil { // recovery: loadLogPositions sets it from the store next
		s.cl.snap.applied = map[int]uint64{}
	}
	if r.op == ownDrop {
		delete(s.cl.snap.applied, r.part)
		return nil
	}
	s.cl.snap.applied[r.part] = r.ckpt.pos
	s.cl.CatchUp.Applied(r.part, r.ckpt.pos)
	return nil
}

// applyOwnTo applies a KindOwn entry of a stream of n partitions to a
// registry, an engine and an attribute table (nil: none): the
// partition's devices leave them and, for an import, the checkpoint's
// enter them, the engine's partials renumbered to this log's position of
// the entry, the attribute versions as the exporter held them (a record
// without the attribute section, from an older build, leaves the
// partition's devices without versions). It returns the record and how
// many registry entries were dropped. Live, recovery and Rebuild apply
// the entries alike.
func applyOwnTo(reg *registry.Registry, eng *aggregate.Engine, tbl *attrs.Table, e *hublog.Entry, n int, log *slog.Logger) (*ownRecord, int, error) {
	if n < 1 {
		return nil, 0, fmt.Errorf("%w: log entry %d: a partition ownership entry outside cluster mode", hublog.ErrCorrupt, e.Seq)
	}
	r, err := decodeOwnRecord(e.Payload, n)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: log entry %d: %v", hublog.ErrCorrupt, e.Seq, err)
	}
	keep := partitionKeep(r.part, n)
	dropped := reg.DropDevices(keep)
	if eng != nil {
		if _, err := eng.DropDevices(keep); err != nil {
			log.Error("cluster mode: dropping a partition's partials from the store", "partition", r.part, "err", err)
		}
	}
	if r.op == ownDrop || !r.ckpt.hasAttrs {
		if tbl != nil {
			tbl.DropDevices(keep)
		}
	}
	if r.op == ownDrop {
		return r, dropped, nil
	}
	if err := reg.ImportDevices(r.ckpt.reg); err != nil {
		return nil, dropped, fmt.Errorf("log entry %d: partition %d: %w", e.Seq, r.part, err)
	}
	if tbl != nil && r.ckpt.hasAttrs {
		// Replaced, not revised: the versions were applied (and their
		// revisions announced) by the exporter in stream order, and the
		// imported partials are the state they were joined with there.
		if _, _, err := tbl.ReplaceDevices(keep, r.ckpt.attrs); err != nil {
			return nil, dropped, fmt.Errorf("log entry %d: partition %d: attribute versions: %w", e.Seq, r.part, err)
		}
	}
	if eng != nil && len(r.ckpt.engine) > 0 {
		if err := eng.ImportDevicesAt(r.ckpt.engine, e.Seq); err != nil {
			return nil, dropped, fmt.Errorf("log entry %d: partition %d: %w", e.Seq, r.part, err)
		}
	}
	return r, dropped, nil
}

// replayOwnEstimator replays a KindOwn entry's clock estimates in
// recovery (live, the committer does it, in log order with the batches'
// observations).
func (s *Server) replayOwnEstimator(e *hublog.Entry) error {
	est, ok := s.opts.ClockEstimator.(devicesHandover)
	if !ok {
		return nil
	}
	r, err := decodeOwnRecord(e.Payload, max(s.opts.NATS.Log.Partitions, 1))
	if err != nil {
		return fmt.Errorf("%w: log entry %d: %v", hublog.ErrCorrupt, e.Seq, err)
	}
	est.DropDevices(partitionKeep(r.part, s.opts.NATS.Log.Partitions))
	if r.op == ownImport && len(r.ckpt.clock) > 0 {
		_ = est.ImportDevices(r.ckpt.clock) // refused live too, and logged then
	}
	return nil
}

// checkpointLoop queues a check of the owned partitions' checkpoints four
// times per CheckpointInterval (at most every second).
func (s *Server) checkpointLoop() {
	o := s.own
	t := time.NewTicker(min(s.opts.NATS.CheckpointInterval/4, time.Second))
	defer t.Stop()
	busy := atomic.Bool{}
	for {
		select {
		case <-o.stop:
			return
		case <-t.C:
			if busy.Swap(true) {
				continue
			}
			o.push(func() { defer busy.Store(false); s.saveDue() })
		}
	}
}

// saveDue saves the checkpoint of every owned partition with
// CheckpointEvery messages applied since its last save, or any applied
// and CheckpointInterval passed, and settles the partitions another hub
// owns.
func (s *Server) saveDue() {
	o := s.own
	now := time.Now()
	st := o.mgr.Status()
	for p := range o.parts {
		pt := &o.parts[p]
		if !pt.owned {
			if ps := st.Partitions[p]; ps.Owner != "" && ps.Owner != st.HubID {
				s.settleOthers(p, now)
			}
			continue
		}
		n := s.cl.appliedMsgs[p].Load()
		if n == 0 || (n < uint64(s.opts.NATS.CheckpointEvery) && now.Sub(pt.lastSave) < s.opts.NATS.CheckpointInterval) {
			continue
		}
		_ = s.savePartition(p, pt.epoch, false)
	}
}

// settleOthers handles partition p, which another hub owns: it does not
// hold /readyz back, and the state this hub recovered of it (from before
// a restart) is dropped once the owner's checkpoint is at or past it, so
// nothing it holds is lost and its devices are answered for by one hub.
// State no checkpoint covers yet is kept: if the owner died before
// saving, this hub may still be the only holder of it.
func (s *Server) settleOthers(p int, now time.Time) {
	o := s.own
	pt := &o.parts[p]
	s.cl.CatchUp.Own(p, false)
	if !pt.local || now.Sub(pt.lastCheck) < s.opts.NATS.CheckpointInterval {
		return
	}
	pt.lastCheck = now
	ctx, cancel := context.WithTimeout(o.ctx, s.opts.NATS.LeaseTTL/2)
	rec, err := o.ckpts.Load(ctx, p)
	cancel()
	if err != nil || rec.Data == nil {
		return
	}
	ck, err := decodePartCkpt(rec.Data)
	if err != nil {
		return
	}
	if ck != nil {
		o.addHolders(p, ck.holders)
	}
	var localPos uint64
	_ = s.inApplier(func() error { localPos = s.cl.snap.applied[p]; return nil })
	if ck.pos < localPos {
		return
	}
	if err := s.dropPartition(p); err != nil {
		s.log.Error("cluster mode: dropping the recovered state of a partition another hub owns", "partition", p, "err", err)
		return
	}
	pt.local = false
	o.m.drops.WithLabelValues("not_owned").Inc()
	s.log.Info("cluster mode: dropped this hub's older state of a partition another hub owns", "partition", p, "local_position", localPos,
		"checkpoint_position", ck.pos)
}

// savePartition captures partition p's applied position and its devices'
// state on the applier, between two groups (so the state is exactly the
// one of that position), and saves them under epoch. A fenced save ends
// the ownership as a loss does. final forces a save even when nothing was
// applied since the last.
func (s *Server) savePartition(p int, epoch uint64, final bool) error {
	o := s.own
	pt := &o.parts[p]
	keep := partitionKeep(p, o.n)
	var ck partCkpt
	var had bool
	err := s.inApplier(func() error {
		ck.pos, had = s.cl.snap.applied[p]
		s.cl.appliedMsgs[p].Store(0)
		if !had || (!final && ck.pos == pt.savedPos) {
			return nil
		}
		var err error
		if s.agg != nil {
			if ck.engine, err = s.agg.eng.ExportDevices(keep); err != nil {
				return err
			}
		}
		if ck.reg, err = s.reg.ExportDevices(keep); err != nil {
			return err
		}
		if s.attrs != nil {
			ck.hasAttrs, ck.attrs = true, s.attrs.ExportDevices(keep)
		}
		if est, ok := s.opts.ClockEstimator.(devicesHandover); ok {
			ck.clock, err = est.ExportDevices(keep)
		}
		return err
	})
	if !had || (!final && ck.pos == pt.savedPos) {
		pt.lastSave = time.Now()
		return err
	}
	if err != nil {
		o.m.saves.WithLabelValues("error").Inc()
		s.log.Error("cluster mode: exporting a partition's state for its checkpoint", "partition", p, "err", err)
		return err
	}
	ck.holders = o.saveHolders(p, s.opts.HubID, s.opts.Now(), s.opts.RetentionMaxAge)
	ctx, cancel := context.WithTimeout(o.ctx, s.opts.NATS.LeaseTTL/2)
	defer cancel()
	data := ck.encode()
	err = o.ckpts.Save(ctx, p, epoch, data)
	switch {
	case err == nil:
		pt.lastSave, pt.savedPos = time.Now(), ck.pos
		o.m.saves.WithLabelValues("ok").Inc()
	case errors.Is(err, natslog.ErrFenced):
		o.m.saves.WithLabelValues("fenced").Inc()
		s.log.Error("cluster mode: a partition's checkpoint save was fenced: another hub owns it", "partition", p, "epoch", epoch, "err", err)
		s.lose(p, epoch, "fenced", err.Error(), true)
	case errors.Is(err, natslog.ErrPartitionCheckpointTooLarge):
		// The next owner starts from the last checkpoint that fitted (or
		// the stream's start) and replays the stream after it.
		o.m.saves.WithLabelValues("too_large").Inc()
		s.log.Error("cluster mode: a partition's state is too large for its checkpoint: a takeover replays the stream after the last one saved",
			"partition", p, "bytes", len(data), "err", err)
	default:
		o.m.saves.WithLabelValues("error").Inc()
		s.log.Error("cluster mode: saving a partition's checkpoint failed; trying again later", "partition", p, "err", err)
	}
	return err
}

// addHolders adds a checkpoint's holders of partition p to those known,
// keeping each hub's later time.
func (o *ownership) addHolders(p int, h map[string]int64) {
	o.hmu.Lock()
	defer o.hmu.Unlock()
	if o.holders[p] == nil {
		o.holders[p] = map[string]int64{}
	}
	for id, ns := range h {
		o.holders[p][id] = max(o.holders[p][id], ns)
	}
}

// saveHolders records self as a holder of partition p as of now, for the
// checkpoint being saved, and returns a copy of the holders to write: a
// hub whose last checkpoint of p is older than retention (the log's
// RetentionMaxAge, the same on every hub) holds none of p's events any
// more and is left out.
func (o *ownership) saveHolders(p int, self string, now time.Time, retention time.Duration) map[string]int64 {
	o.hmu.Lock()
	defer o.hmu.Unlock()
	h := o.holders[p]
	if h == nil {
		h = map[string]int64{}
		o.holders[p] = h
	}
	h[self] = now.UnixNano()
	cutoff := now.Add(-retention).UnixNano()
	maps.DeleteFunc(h, func(_ string, ns int64) bool { return ns < cutoff })
	for len(h) > maxHolders { // bounded as a reader bounds them: the oldest go
		var oldest string
		for id, ns := range h {
			if oldest == "" || ns < h[oldest] {
				oldest = id
			}
		}
		delete(h, oldest)
	}
	return maps.Clone(h)
}

// HistoryHolders returns the hubs other than this one whose local logs
// may hold events of partition p this hub's log does not, from the
// partition's checkpoints (sorted; none outside cluster mode): GET
// /v1/events asks them and names those that do not answer.
func (s *Server) HistoryHolders(p int) []string {
	o := s.own
	if o == nil || p < 0 || p >= len(o.holders) {
		return nil
	}
	cutoff := s.opts.Now().Add(-s.opts.RetentionMaxAge).UnixNano()
	o.hmu.Lock()
	defer o.hmu.Unlock()
	var out []string
	for id, ns := range o.holders[p] {
		if id != s.opts.HubID && ns >= cutoff {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}
