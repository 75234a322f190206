package hub

import (
	"context"
	"edgeflow/hub/hublog"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// stateDoc is the checkpointed state: the registry and each consumer's
// snapshot. encoding/json sorts map keys, so equal states encode equally.
type stateDoc struct {
	Registry  json.RawMessage   `json:"registry"`
	Consumers map[string][]byte `json:"consumers,omitempty"`
}

// stateBytes encodes the applied state. Call it from the applier's
// goroutine (or when that is not running).
func (s *Server) stateBytes() ([]byte, error) {
	reg, err := s.reg.Snapshot()
	if err != nil {
		return nil, fmt.Errorf("snapshot registry: %w", err)
	}
	doc := stateDoc{Registry: reg}
	for _, c := range s.opts.Consumers {
		b, err := c.Snapshot()
		if err != nil {
			return nil, fmt.Errorf("snapshot consumer %s: %w", c.Name(), err)
		}
		if doc.Consumers == nil {
			doc.Consumers = map[string][]byte{}
		}
		doc.Consumers[c.Name()] = b
	}
	return json.Marshal(doc)
}

// restoreState loads a checkpoint's state into the registry and consumers.
func (s *Server) restoreState(b []byte) error {
	var doc stateDoc
	if err := json.Unmarshal(b, &doc); err != nil {
		return fmt.Errorf("%w: state: %v", hublog.ErrCheckpointDamaged, err)
	}
	if err := s.reg.Restore(doc.Registry); err != nil {
		return fmt.Errorf("%w: registry: %v", hublog.ErrCheckpointDamaged, err)
	}
	for _, c := range s.opts.Consumers {
		snap, ok := doc.Consumers[c.Name()]
		if !ok {
			s.log.Warn("checkpoint has no snapshot of consumer; it starts empty", "consumer", c.Name())
			continue
		}
		if err := c.Restore(snap); err != nil {
			return fmt.Errorf("restore consumer %s: %w", c.Name(), err)
		}
	}
	return nil
}

// recoverState loads the dedup state and the newest usable checkpoint,
// replays the log after it and sets up the committer. A damaged
// checkpoint is passed over for the one before it, or for a replay of the
// whole log (checkpoint.go); damage to the log stops the start unless
// Options.RecoverDamaged (damage.go).
func (s *Server) recoverState(ctx context.Context) error {
	start := time.Now()
	if err := s.restoreFromSnapshot(ctx); err != nil {
		return err
	}
	dedup, err := s.st.LoadDedup()
	if err != nil {
		return fmt.Errorf("load applied ranges from %s: %w", s.st.Dir, err)
	}
	records, err := s.st.LoadDamageRecords()
	if err != nil {
		return err
	}
	known := hublog.LossesOf(records)
	fellBack, full, err := s.restoreCheckpoint()
	if err != nil {
		return err
	}
	if full {
		if err := s.freshPartialGeneration(); err != nil {
			return err
		}
	}
	from := s.app.lastSeq
	replayed := 0
	dmg, err := s.st.ReplayChecked(from, 0, false, &known.Positions, func(e *hublog.Entry) error {
		if replayed++; replayed%1024 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		return s.replayEntry(e)
	})
	if err != nil {
		return fmt.Errorf("replay log of %s: %w", s.st.Dir, err)
	}
	lost := s.reg.LostSince(dedup, known)
	if dmg.Any() {
		if records, err = s.recordDamage(dmg, lost, records); err != nil {
			return err
		}
	} else if len(lost) > 0 {
		s.log.Error("recovered state disagrees with the stored applied ranges; dedup follows the stored ranges",
			"streams", len(lost), "first_device", lost[0].Device, "first_stream", lost[0].Stream, "missing", hublog.FormatRanges(&lost[0].Lost))
	}
	s.reg.ApplyLosses(records)
	known = hublog.LossesOf(records)
	s.dm.lostEvents.Set(float64(known.Events))
	last, err := s.st.LastWALSeq()
	if err != nil {
		return err
	}
	s.com = &committer{in: make(chan *pending, s.opts.QueueLen), toAck: make(chan []*pending, 4),
		toApply: make(chan []*pending, applyQueueGroups), st: s.st, streams: dedup, nextSeq: max(last, s.app.lastSeq, known.Positions.Max()) + 1,
		estimator: s.opts.ClockEstimator, opts: &s.opts, m: s.m}
	s.com.committed.Store(s.com.nextSeq - 1)
	if s.own != nil {
		s.com.gens = s.own.gen
	}
	s.com.lag.limit = s.opts.Memory.ApplyLag
	s.com.initStreams(s.opts.Now().UnixNano())
	if fellBack || full || dmg.Any() {
		// Replace the damaged checkpoint (or record the loss in one) now,
		// so the next start does not go through this again.
		if err := s.forceCheckpoint(); err != nil {
			return fmt.Errorf("checkpoint after recovering %s: %w", s.st.Dir, err)
		}
		if full && s.agg != nil {
			gen := s.agg.store.Generation()
			if _, err := hublog.DropGenerations(s.st.DB, func(g uint64) bool { return g != gen }); err != nil {
				s.log.Warn("deleting partials of the damaged checkpoint's generation failed; they only take space", "err", err)
			}
		}
	}
	s.log.Info("hub state recovered", "checkpoint_position", from, "replayed_entries", replayed,
		"streams", len(dedup), "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// restoreCheckpoint restores the newest usable checkpoint. A damaged one
// is logged, counted and passed over; fellBack says one was. full says
// checkpoints were stored but none is usable, so the whole log must be
// replayed.
func (s *Server) restoreCheckpoint() (fellBack, full bool, err error) {
	all, err := s.st.LoadCheckpoints()
	if err != nil {
		return false, false, fmt.Errorf("load checkpoint from %s: %w", s.st.Dir, err)
	}
	var chosen, older *hublog.Checkpoint
	for _, sc := range all {
		if chosen != nil {
			if sc.Err == nil {
				older = sc.Checkpoint
			} else {
				s.log.Warn("the checkpoint before the newest is damaged; the next checkpoint replaces it", "dir", s.st.Dir, "key", sc.Key, "err", sc.Err)
			}
			break
		}
		if sc.Err == nil {
			if sc.Err = s.restoreState(sc.State); sc.Err == nil {
				chosen = sc.Checkpoint
				continue
			}
			if !errors.Is(sc.Err, hublog.ErrCheckpointDamaged) {
				return false, false, sc.Err
			}
		}
		fellBack = true
		pos := "unknown"
		if sc.Checkpoint != nil {
			pos = fmt.Sprint(sc.Checkpoint.Pos)
		}
		s.log.Error("checkpoint damaged; recovering from the one before it, else by replaying the whole log",
			"dir", s.st.Dir, "key", sc.Key, "position", pos, "err", sc.Err)
	}
	if chosen == nil {
		if fellBack {
			s.dm.fallbacks.WithLabelValues("log").Inc()
			s.log.Error("no usable checkpoint: replaying the whole log", "dir", s.st.Dir)
		}
		return fellBack, fellBack, nil
	}
	if fellBack {
		s.dm.fallbacks.WithLabelValues("previous").Inc()
		s.log.Warn("recovering from the previous checkpoint", "dir", s.st.Dir, "position", chosen.Pos)
	}
	s.st.RetainedCheckpoints(chosen, older)
	s.app.lastSeq, s.lastCkpt = chosen.Pos, chosen
	s.ckptPos.Store(s.st.OldestRetainedPos())
	return fellBack, false, nil
}

// freshPartialGeneration points the engine at a partial generation no
// stored partial uses, so a replay of the whole log never reads partials
// a damaged checkpoint's lineage evicted.
func (s *Server) freshPartialGeneration() error {
	if s.agg == nil {
		return nil
	}
	gen, found, err := hublog.MaxPartialGeneration(s.st.DB)
	if err != nil {
		return err
	}
	if found {
		s.agg.store.SetGeneration(gen + 1)
	}
	return nil
}

// recordDamage handles damage a replay found: without RecoverDamaged it
// is the error that stops the start; with it, the loss is recorded (see
// damage.go), counted and logged, and the records returned include it.
func (s *Server) recordDamage(dmg *hublog.LogDamage, lost []hublog.LostStream, records []hublog.DamageRecord) ([]hublog.DamageRecord, error) {
	devices := s.st.DevicesAt(&dmg.Positions)
	derr := dmg.Err(s.st.Dir, devices)
	if !s.opts.RecoverDamaged {
		return nil, derr
	}
	rec := hublog.NewDamageRecord(s.opts.Now().UnixNano(), dmg, devices, lost)
	if err := s.st.WriteDamageRecord(rec, dmg.Unreadable); err != nil {
		return nil, err
	}
	var events uint64
	for _, l := range lost {
		events += l.Lost.Count()
	}
	s.dm.damaged.Add(float64(dmg.Positions.Count()))
	s.log.Error("hub store damaged: started without the unreadable log entries (recover-damaged); the loss is recorded as gaps with reason "+hublog.GapReasonStoreDamaged,
		"dir", s.st.Dir, "positions", hublog.FormatRanges(&dmg.Positions), "entries", dmg.Positions.Count(),
		"from_server_time", derr.FromServerTime, "to_server_time", derr.ToServerTime, "devices", devices,
		"streams", len(lost), "lost_events", events)
	return append(records, *rec), nil
}

// forceCheckpoint writes a checkpoint of the applied state even at the
// position of the last one. Only recovery calls it, before the pipeline
// runs.
func (s *Server) forceCheckpoint() error {
	s.ckptMu.Lock()
	defer s.ckptMu.Unlock()
	state, err := s.stateBytes()
	return s.writeCheckpoint(s.app.lastSeq, state, err)
}

// replayEntry applies one logged entry during recovery.
func (s *Server) replayEntry(e *hublog.Entry) error {
	if e.Kind == hublog.KindOwn {
		if err := s.replayOwnEstimator(e); err != nil {
			return err
		}
	}
	if e.Kind != hublog.KindBatch {
		return s.app.applyEntry(e, nil)
	}
	v, err := s.app.parseStored(e)
	if err != nil {
		return err
	}
	observe(s.opts.ClockEstimator, e.Device, v.SendTimeNs, e.ServerTimeNs)
	return s.app.applyEntry(e, v)
}

// StateDump returns the applied state as a checkpoint stores it
// (deterministic JSON) and the log position it covers; two hubs that
// applied the same log dump the same bytes.
func (s *Server) StateDump() (state []byte, pos uint64, err error) {
	err = s.inApplier(func() error {
		state, err = s.stateBytes()
		pos = s.app.lastSeq
		return err
	})
	return state, pos, err
}
