package hub

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/nats-io/nats.go/jetstream"

	"edgeflow/hub/cluster"
	"edgeflow/hub/hublog"
	"edgeflow/hub/natslog"
)

// clusterSnap is cluster mode's state snapshots in natslog.Snapshots: the
// applied state with the stream positions it covers, uploaded every
// cluster.Options.SnapshotInterval off the apply path, and restored by a hub
// started on an empty data directory (docs/CLUSTER.md).
type clusterSnap struct {
	// applied is, per partition, the last stream sequence the applier
	// applied (or decided: duplicates and rejections count too). Only the
	// applier goroutine touches it once the pipeline runs; a capture
	// copies it there, with the state, so a snapshot never claims a
	// position beyond its state.
	applied map[int]uint64

	store    atomic.Pointer[natslog.Snapshots]
	upMu     sync.Mutex // one upload at a time; guards the fields below
	gen      uint64     // the head generation the next Put names
	genKnown bool       // gen was read or assigned
	// lastPosPtr holds the positions of the last stored (or restored)
	// snapshot; set under upMu, read on the applier.
	lastPosPtr atomic.Pointer[map[int]uint64]
	lastPause  time.Duration // the last stored snapshot's capture time on the applier

	restoredGen uint64         // the generation restored at start (0: none)
	restoredPos map[int]uint64 // its positions, checked against the stream

	failAfterCheckpoint bool // tests: a restore stops as if the hub died after writing its checkpoint
}

// noteApplied records the stream position of an applied (or decided)
// message (applier goroutine); a stale one is not this hub's to count.
func (c *clusterMode) noteApplied(p *pending) {
	if p.logSeq != 0 && !p.stale && p.logSeq > c.snap.applied[p.logPart] {
		c.snap.applied[p.logPart] = p.logSeq
		c.CatchUp.Applied(p.logPart, p.logSeq)
		if c.appliedMsgs != nil {
			c.appliedMsgs[p.logPart].Add(1)
		}
	}
}

// snapCapture is the applied state taken between two groups.
type snapCapture struct {
	cluster.Snap // stream, log position, state and partial generation; no partials
	positions    map[int]uint64
	txn          *badger.Txn   // a read of Badger at the capture: the partials the state refers to
	pause        time.Duration // the applier's time spent on the capture
}

// captureSnapshot takes the applied state, its stream positions and a
// read of the partials on the applier goroutine, between groups. It
// returns nil when nothing from the stream was applied since the last
// stored snapshot.
func (s *Server) captureSnapshot() (*snapCapture, error) {
	c := &snapCapture{}
	err := s.inApplier(func() error {
		if len(s.cl.snap.applied) == 0 || maps.Equal(s.cl.snap.applied, s.cl.snap.lastPosSeen()) {
			c = nil
			return nil
		}
		start := time.Now()
		defer func() { c.pause = time.Since(start) }()
		state, err := s.stateBytes() // flushes the engine's partials
		if err != nil {
			return err
		}
		c.Stream, c.State, c.WALPos, c.positions = s.opts.NATS.Log.Stream, state, s.app.lastSeq, maps.Clone(s.cl.snap.applied)
		if s.agg != nil {
			c.Gen = s.agg.store.Generation()
			c.txn = s.st.DB.NewTransaction(false)
		}
		return nil
	})
	return c, err
}

// lastPosSeen returns the positions of the last stored snapshot; it is
// set under upMu and read on the applier, so it is swapped whole.
func (cs *clusterSnap) lastPosSeen() map[int]uint64 {
	if p := cs.lastPosPtr.Load(); p != nil {
		return *p
	}
	return nil
}

// snapshotNow captures the state and stores it as the next snapshot
// generation; one at a time. ErrSnapshotConflict is another writer's
// snapshot: logged, and the next Put names the head generation it wrote.
func (s *Server) snapshotNow(ctx context.Context) error {
	cs := &s.cl.snap
	cs.upMu.Lock()
	defer cs.upMu.Unlock()
	snaps := cs.store.Load()
	if snaps == nil {
		return errors.New("cluster mode: snapshot store not open yet")
	}
	if others := s.otherHubs(); others > 0 {
		// Each hub holds only the partitions it applies, and their
		// checkpoints hold the same state partition by partition: a
		// whole-state snapshot would only race the other hubs' for the
		// pointer.
		s.clm.Snap.Uploads.WithLabelValues("shared").Inc()
		s.log.Debug("cluster mode: no state snapshot while other hubs share the stream; the partition checkpoints hold the state", "other_hubs", others)
		return nil
	}
	if !cs.genKnown {
		g, err := snaps.HeadGeneration(ctx)
		if err != nil {
			s.clm.Snap.Uploads.WithLabelValues("error").Inc()
			return fmt.Errorf("cluster mode: reading the snapshot pointer: %w", err)
		}
		cs.gen, cs.genKnown = g, true
	}
	c, err := s.captureSnapshot()
	if err != nil || c == nil {
		if err != nil {
			s.clm.Snap.Uploads.WithLabelValues("error").Inc()
		}
		return err
	}
	start := time.Now()
	b, err := cluster.Encode(&c.Snap, c.txn, s.opts.NATS.SnapMaxBytes())
	if c.txn != nil {
		c.txn.Discard() // the partials are read
	}
	if err != nil {
		s.clm.Snap.Uploads.WithLabelValues("error").Inc()
		return fmt.Errorf("cluster mode: encoding a state snapshot: %w", err)
	}
	gen, err := snaps.Put(ctx, natslog.Snapshot{Positions: c.positions, State: b, Taken: s.opts.Now(), Hub: s.opts.ClientID, Generation: cs.gen})
	switch {
	case err == nil:
		cs.gen = gen
		pos := c.positions
		cs.lastPosPtr.Store(&pos)
		cs.lastPause = c.pause
		s.clm.Snap.Uploads.WithLabelValues("ok").Inc()
		s.clm.Snap.Bytes.Set(float64(len(b)))
		s.log.Info("cluster mode: state snapshot stored", "generation", gen, "bytes", len(b), "log_position", c.WALPos,
			"partitions", len(c.positions), "applier_pause", c.pause.Round(time.Microsecond), "took", time.Since(start).Round(time.Millisecond))
		return nil
	case errors.Is(err, natslog.ErrSnapshotConflict):
		s.clm.Snap.Uploads.WithLabelValues("conflict").Inc()
		s.log.Error("cluster mode: another writer stored a state snapshot since this hub's last one; two hubs may be reading the stream", "expected_generation", cs.gen, "err", err)
	default:
		s.clm.Snap.Uploads.WithLabelValues("error").Inc()
		s.log.Error("cluster mode: storing a state snapshot failed; retried at the next interval", "err", err)
	}
	cs.genKnown = false // read the head again before the next Put
	return err
}

// snapshotLoop opens the snapshot store, checks a restored snapshot's
// positions against the stream, then stores a snapshot every
// SnapshotInterval until ctx ends.
func (s *Server) snapshotLoop(ctx context.Context, js jetstream.JetStream, l *natslog.Log) {
	cs := &s.cl.snap
	for delay := 100 * time.Millisecond; cs.store.Load() == nil; delay = min(2*delay, 5*time.Second) {
		actx, cancel := context.WithTimeout(ctx, s.opts.PublishTimeout)
		snaps, err := natslog.OpenSnapshots(actx, js, s.opts.NATS.SnapOptions())
		cancel()
		if err == nil {
			cs.store.Store(snaps)
			break
		}
		s.rejLog.log(s.log, "snapshot", "", "cluster mode: opening the snapshot buckets failed; retrying", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
	}
	switch {
	case cs.restoredPos != nil:
		s.cl.CheckPositions(ctx, l, cs.restoredPos, s.opts.NATS.Log.Partitions, "the restored snapshot's positions", cs.restoredGen)
	case len(s.cl.from) > 0:
		// A local data directory: only partitions it holds a position of.
		s.cl.CheckPositions(ctx, l, s.cl.from, 0, "this hub's committed positions (its data directory is older than the stream's retention)", cs.restoredGen)
	}
	t := time.NewTicker(s.opts.NATS.SnapshotInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = s.snapshotNow(ctx) // logged and counted
		}
	}
}

// restoreFromSnapshot restores, in cluster mode on an empty data
// directory, the latest state snapshot into the store: the partials its
// engine refers to, the applied ranges its registry holds, a local
// checkpoint of its state at its log position and its stream positions.
// recoverState then recovers from that checkpoint as after a local
// restart. No snapshot: the hub reads every partition from the stream's
// start. A fallback to an older generation is logged; no readable
// generation is logged loudly and the hub reads from the start.
func (s *Server) restoreFromSnapshot(ctx context.Context) error {
	if s.cl == nil {
		return nil
	}
	empty, err := s.st.IsEmpty()
	if err != nil || !empty {
		return err
	}
	snap, result, err := s.latestSnapshot(ctx)
	if err != nil || result == "" {
		return err
	}
	start := time.Now()
	d, err := cluster.Decode(snap.State)
	if err != nil {
		s.clm.Snap.Restores.WithLabelValues("unreadable").Inc()
		s.log.Error("cluster mode: the latest state snapshot does not decode; reading every partition from the stream's start (what retention dropped is lost)",
			"generation", snap.Generation, "err", err)
		return nil
	}
	if d.Stream != s.opts.NATS.Log.Stream {
		s.clm.Snap.Restores.WithLabelValues("unreadable").Inc()
		s.log.Error("cluster mode: the latest state snapshot is of another stream; reading every partition from the stream's start",
			"generation", snap.Generation, "snapshot_stream", d.Stream, "stream", s.opts.NATS.Log.Stream)
		return nil
	}
	if err := s.restoreState(d.State); err != nil {
		return fmt.Errorf("cluster mode: restoring state snapshot generation %d: %w", snap.Generation, err)
	}
	if err := s.writeRestored(d, snap.Positions); err != nil {
		return fmt.Errorf("cluster mode: writing state snapshot generation %d into %s: %w", snap.Generation, s.st.Dir, err)
	}
	s.clm.Snap.Restores.WithLabelValues(result).Inc()
	s.cl.snap.restoredGen, s.cl.snap.restoredPos = snap.Generation, snap.Positions
	s.cl.snap.gen, s.cl.snap.genKnown = snap.Generation, false // the head may be newer after a fallback
	pos := maps.Clone(snap.Positions)
	s.cl.snap.lastPosPtr.Store(&pos)
	s.log.Info("cluster mode: restored the state snapshot into an empty data directory", "generation", snap.Generation,
		"taken", snap.Taken, "by", snap.Hub, "bytes", len(snap.State), "log_position", d.WALPos, "partials", len(d.Partials),
		"partitions", len(snap.Positions), "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// latestSnapshot dials NATS if need be and reads the latest readable
// snapshot (cluster.Stream.LatestSnapshot).
func (s *Server) latestSnapshot(ctx context.Context) (natslog.Snapshot, string, error) {
	if s.tr == nil {
		if err := s.dialNATS(); err != nil {
			return natslog.Snapshot{}, "", err
		}
	}
	js, err := jetstream.New(s.cl.Bus().Conn())
	if err != nil {
		return natslog.Snapshot{}, "", fmt.Errorf("cluster mode: %w", err)
	}
	return s.cl.LatestSnapshot(ctx, js, s.opts.NATS.SnapOptions())
}

// writeRestored writes a restored snapshot into the empty store: the
// partials first (without a checkpoint a store holding only them is still
// empty, and a restart restores again), then the checkpoint, then the
// applied ranges and the positions in one transaction. A store without
// ranges or positions counts as empty, so a crash before that transaction
// restores again; once it is written, a restart recovers locally.
func (s *Server) writeRestored(d *cluster.Snap, positions map[int]uint64) error {
	for p := range positions {
		if p < 0 || p >= s.opts.NATS.Log.Partitions {
			return fmt.Errorf("the snapshot holds a position of partition %d; the stream has %d partitions", p, s.opts.NATS.Log.Partitions)
		}
	}
	wb := s.st.DB.NewWriteBatch()
	for _, p := range d.Partials {
		if err := wb.Set(p.Key, p.Value); err != nil {
			wb.Cancel()
			return err
		}
	}
	if err := wb.Flush(); err != nil {
		return err
	}
	if _, err := s.st.WriteCheckpoint(d.WALPos, d.State, s.opts.Now().UnixNano()); err != nil {
		return err
	}
	if s.cl.snap.failAfterCheckpoint {
		return errors.New("stopped after the checkpoint (test)")
	}
	return s.st.DB.Update(func(txn *badger.Txn) error {
		for k, st := range s.reg.DedupStates() {
			if err := txn.Set(hublog.RangesKey(k.Device, k.ID), hublog.EncodeDedup(st)); err != nil {
				return err
			}
		}
		for p, seq := range positions {
			if err := txn.Set(hublog.LogPositionKey(s.opts.NATS.Log.Stream, p), hublog.EncodeLogPosition(seq)); err != nil {
				return err
			}
		}
		return s.setBackfillPlan(txn, positions)
	})
}

// otherHubs is how many other hubs the lease view shows live (0 before
// the lease manager opens).
func (s *Server) otherHubs() int {
	m := s.LeaseManager()
	if m == nil {
		return 0
	}
	n := 0
	for _, id := range m.Leases().Members {
		if id != s.opts.HubID {
			n++
		}
	}
	return n
}
