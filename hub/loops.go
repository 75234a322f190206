package hub

import (
	"errors"
	"time"

	"edgeflow/hub/eventtime"
	"edgeflow/hub/hublog"
	badger "github.com/dgraph-io/badger/v4"
)

// applierReq asks the applier goroutine to run fn between groups.
type applierReq struct {
	fn    func() error
	reply chan error
}

// applyLoop applies committed groups in order and serves checkpoint and
// state requests between groups, so they see a consistent state.
func (s *Server) applyLoop() {
	for {
		select {
		case g, ok := <-s.com.toApply:
			if !ok {
				return
			}
			s.applyGroup(g)
			s.com.lag.release(groupBytes(g))
		case req := <-s.applierReqs:
			req.reply <- req.fn()
		}
	}
}

// applyGroup applies the logged entries of one group and recycles views.
func (s *Server) applyGroup(g []*pending) {
	for _, p := range g {
		if p.accepted && p.logSeq != 0 && s.own != nil && s.own.gen[p.logPart].Load() != p.logGen {
			// Committed before its partition was lost, applied after: the
			// partition's devices are being dropped; the log's KindOwn
			// entry after it drops them in a replay too.
			p.stale = true
			s.app.lastSeq = p.entry.Seq
			s.own.m.discarded.Inc()
			s.own.skipped[p.logPart].Store(true)
		} else if p.accepted {
			before := s.app.events
			err := s.app.applyEntry(&p.entry, p.view)
			if err != nil {
				s.log.Error("apply log entry", "position", p.entry.Seq, "err", err)
			}
			if p.applied != nil {
				p.applied <- err
			}
			s.m.events.Add(float64(s.app.events - before))
		} else if p.applied != nil {
			p.applied <- errNotLogged
		}
		if s.cl != nil {
			s.cl.noteApplied(p)
		}
		if p.view != nil {
			s.views.Put(p.view)
			p.view = nil
		}
	}
}

// inApplier runs fn on the applier goroutine while it runs, else directly.
func (s *Server) inApplier(fn func() error) error {
	if s.workers == nil {
		return fn() // not started: nothing runs concurrently
	}
	req := applierReq{fn: fn, reply: make(chan error, 1)}
	select {
	case s.applierReqs <- req:
		return <-req.reply
	case <-s.applyDone:
		return fn()
	}
}

// checkpointNow writes a checkpoint of the applied state if anything was
// applied since the last one. The caller owns the applied state: shutdown,
// once the applier has stopped.
func (s *Server) checkpointNow() error {
	s.ckptMu.Lock()
	defer s.ckptMu.Unlock()
	pos := s.app.lastSeq
	if s.lastCkpt != nil && s.lastCkpt.Pos == pos {
		return nil
	}
	state, err := s.stateBytes()
	return s.writeCheckpoint(pos, state, err)
}

// Checkpoint writes a checkpoint now (it also happens every
// CheckpointInterval and on Shutdown). Only the state's encoding runs on
// the applier goroutine; the write and its sync run here, so batches keep
// being applied (and, the apply queue being short, acknowledged) while a
// large state is written.
func (s *Server) Checkpoint() error {
	if s.com == nil {
		return errors.New("hub: not started")
	}
	s.ckptMu.Lock()
	defer s.ckptMu.Unlock()
	var (
		pos   uint64
		state []byte
		same  bool
	)
	err := s.inApplier(func() error {
		pos = s.app.lastSeq
		if same = s.lastCkpt != nil && s.lastCkpt.Pos == pos; same {
			return nil
		}
		start := time.Now()
		var err error
		state, err = s.stateBytes()
		s.m.ckptEncode.Observe(time.Since(start).Seconds())
		return err
	})
	if same {
		return nil
	}
	return s.writeCheckpoint(pos, state, err)
}

// writeCheckpoint stores state (or counts encErr, the failure to encode
// it) as the checkpoint at pos; the caller holds ckptMu.
func (s *Server) writeCheckpoint(pos uint64, state []byte, encErr error) error {
	err := encErr
	if err == nil {
		var ck *hublog.Checkpoint
		if ck, err = s.st.WriteCheckpoint(pos, state, s.opts.Now().UnixNano()); err == nil {
			s.lastCkpt = ck
			s.ckptPos.Store(s.st.OldestRetainedPos())
			s.m.checkpoints.WithLabelValues("ok").Inc()
			s.log.Debug("checkpoint written", "position", pos, "bytes", len(state))
			return nil
		}
	}
	s.m.checkpoints.WithLabelValues("error").Inc()
	s.log.Error("checkpoint failed", "position", pos, "err", err)
	return err
}

// startLoops starts the periodic checkpoint and retention loops.
func (s *Server) startLoops() {
	s.loopsWG.Add(2)
	go func() { defer s.loopsWG.Done(); s.every(s.opts.CheckpointInterval, func() { _ = s.Checkpoint() }) }()
	go func() { defer s.loopsWG.Done(); s.every(s.opts.RetentionInterval, func() { _, _ = s.Retain() }) }()
	if s.agg != nil {
		s.loopsWG.Add(1)
		go func() { defer s.loopsWG.Done(); s.every(s.opts.TickInterval, s.logTick) }()
	}
}

// logTick sends a tick through the log: the committer gives it a position
// and the applier hands it to the engine in log order, so a replay or a
// rebuild moves processing time exactly as the live run did. A tick costs
// a 30-byte log entry (and shares its group's fsync).
func (s *Server) logTick() {
	p := &pending{kind: hublog.KindTick, serverTimeNs: s.opts.Now().UnixNano()}
	s.enqueue(func() { s.com.in <- p })
}

// every calls fn every d until the server stops.
func (s *Server) every(d time.Duration, fn func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
			fn()
		}
	}
}

// Retain deletes log entries older than RetentionMaxAge that both
// retained checkpoints cover (so recovery can fall back to the older), and
// their event-time index keys, then lets Badger reclaim value log space.
// It returns how many entries it deleted.
func (s *Server) Retain() (int, error) {
	cutoff := s.opts.Now().Add(-s.opts.RetentionMaxAge).UnixNano()
	pos := s.sinkRetainPos(s.ckptPos.Load())
	deleted := 0
	backfilled, err := s.retainBackfilled(cutoff) // cluster mode's backfilled entries (cluster_backfill.go)
	if err != nil {
		return 0, err
	}
	for {
		keys, err := s.expiredKeys(cutoff, pos)
		if err != nil || len(keys) == 0 {
			s.collectGarbage(deleted + backfilled)
			return deleted, err
		}
		// The index keys go first: after a crash between the two, the
		// entries are still there and the next pass deletes both.
		idx, err := eventtime.KeysOfLog(s.st, keys, s.opts.Limits)
		if err == nil {
			err = hublog.DeleteKeys(s.st.DB, idx)
		}
		if err == nil {
			err = hublog.DeleteKeys(s.st.DB, keys)
		}
		if err != nil {
			return deleted, err
		}
		deleted += len(keys)
		s.m.walDeleted.Add(float64(len(keys)))
	}
}

// expiredKeys returns up to retainBatch of the oldest log keys that are
// older than cutoff and at or below position pos.
func (s *Server) expiredKeys(cutoff int64, pos uint64) ([][]byte, error) {
	var keys [][]byte
	err := s.st.DB.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{hublog.PrefixWAL}})
		defer it.Close()
		for it.Rewind(); it.Valid() && len(keys) < hublog.RetainBatch; it.Next() {
			seq, t, err := hublog.ParseWALKey(it.Item().Key())
			if err != nil {
				return err
			}
			if seq > pos || t >= cutoff {
				return nil
			}
			keys = append(keys, it.Item().KeyCopy(nil))
		}
		return nil
	})
	return keys, err
}

// collectGarbage runs Badger's value log GC after deletions.
func (s *Server) collectGarbage(deleted int) {
	if deleted == 0 {
		return
	}
	for i := 0; i < 16; i++ {
		if err := s.st.DB.RunValueLogGC(0.5); err != nil {
			return
		}
	}
}
