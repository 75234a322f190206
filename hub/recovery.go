package hub

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
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
	reg, err := s.reg.snapshot()
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
		return fmt.Errorf("%w: checkpoint state: %v", ErrCorrupt, err)
	}
	if err := s.reg.restore(doc.Registry); err != nil {
		return fmt.Errorf("%w: checkpoint registry: %v", ErrCorrupt, err)
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

// recoverState loads the dedup state and the last checkpoint, replays the
// log after it and sets up the committer.
func (s *Server) recoverState(ctx context.Context) error {
	start := time.Now()
	dedup, err := s.st.loadDedup()
	if err != nil {
		return fmt.Errorf("load applied ranges from %s: %w", s.st.dir, err)
	}
	ck, state, err := s.st.loadCheckpoint()
	if err != nil {
		return fmt.Errorf("load checkpoint from %s: %w", s.st.dir, err)
	}
	if ck != nil {
		if err := s.restoreState(state); err != nil {
			return err
		}
		s.app.lastSeq, s.lastCkpt = ck.Pos, ck
		s.ckptPos.Store(ck.Pos)
	}
	from := s.app.lastSeq
	replayed := 0
	err = s.st.replay(from, func(e *walEntry) error {
		if replayed++; replayed%1024 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		return s.replayEntry(e)
	})
	if err != nil {
		return fmt.Errorf("replay log of %s: %w", s.st.dir, err)
	}
	last, err := s.st.lastWALSeq()
	if err != nil {
		return err
	}
	s.com = &committer{in: make(chan *pending, s.opts.QueueLen), toAck: make(chan []*pending, 4),
		toApply: make(chan []*pending, applyQueueGroups), st: s.st, streams: dedup, nextSeq: max(last, s.app.lastSeq) + 1,
		estimator: s.opts.ClockEstimator, opts: &s.opts, m: s.m}
	s.com.committed.Store(s.com.nextSeq - 1)
	s.checkRecovered(dedup)
	s.log.Info("hub state recovered", "checkpoint_position", from, "replayed_entries", replayed,
		"streams", len(dedup), "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// replayEntry applies one logged entry during recovery.
func (s *Server) replayEntry(e *walEntry) error {
	if e.kind != entryBatch {
		return s.app.applyEntry(e, nil)
	}
	v, err := s.app.parseStored(e)
	if err != nil {
		return err
	}
	observe(s.opts.ClockEstimator, e.device, v.sendTimeNs, e.serverTimeNs)
	return s.app.applyEntry(e, v)
}

// checkRecovered compares the durable applied ranges with those the
// registry rebuilt; they differ only if the store was tampered with or the
// checkpoint is from another log.
func (s *Server) checkRecovered(dedup map[streamKey]*dedupState) {
	s.reg.mu.RLock()
	defer s.reg.mu.RUnlock()
	for k, d := range dedup {
		var got RangeSet
		if dev := s.reg.devices[k.device]; dev != nil && dev.Streams[k.id.String()] != nil {
			si := dev.Streams[k.id.String()]
			got = si.Applied.Clone()
			for _, r := range si.Refused.Ranges() {
				got.Add(r.First, r.Last)
			}
		}
		if !slices.Equal(got.Ranges(), d.applied.Ranges()) {
			s.log.Error("recovered state disagrees with the stored applied ranges; dedup follows the stored ranges",
				"device", k.device, "stream", k.id.String(), "stored", d.applied.Count(), "rebuilt", got.Count())
		}
	}
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
