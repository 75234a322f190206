package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// RebuildResult says what Rebuild did.
type RebuildResult struct {
	// Position is the log position the rebuilt state covers (the last
	// checkpoint's); 0 when there was no checkpoint.
	Position uint64
	// FirstEntry is the oldest log entry still stored; entries before it
	// were deleted by retention and are not in the rebuilt aggregates.
	FirstEntry uint64
	// Entries and Batches count the log entries read and the batches
	// applied; Events the events applied.
	Entries, Batches int
	Events           uint64
	// Generation is the partial store generation the rebuilt state uses.
	Generation uint64
	// Took is the wall time of the rebuild.
	Took time.Duration
}

// Rebuild recomputes the event-time engine's state from the stored log
// with opts.Aggregate (for example after a window, resolution or tag_keys
// change) and replaces the engine's part of the last checkpoint. The hub
// must not be running on opts.DataDir (Badger holds a lock on it).
//
// The engine is rebuilt from the log entries up to the checkpoint's
// position, ticks included, into a fresh partial store generation; then
// the checkpoint is rewritten with the same position and registry and the
// new engine snapshot, and the old generation's partials are deleted. The
// next start replays the entries after the position as usual. Because
// ticks are logged, a rebuild with the configuration the hub ran with
// gives exactly the state live ingest produced, as long as retention has
// not deleted log entries the aggregates still cover (see FirstEntry).
// Without a checkpoint there is nothing to replace: the stored partials are
// deleted and the next start recomputes everything from the log.
func Rebuild(ctx context.Context, opts Options) (*RebuildResult, error) {
	start := time.Now()
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.Aggregate == nil {
		return nil, fmt.Errorf("%w: Aggregate: required to rebuild", ErrInvalidOptions)
	}
	agg, err := newAggregates(*opts.Aggregate, opts.Logger, opts.Now)
	if err != nil {
		return nil, fmt.Errorf("%w: Aggregate: %w", ErrInvalidOptions, err)
	}
	st, err := openStore(opts.DataDir, true, opts.Logger)
	if err != nil {
		return nil, err
	}
	defer st.close()
	agg.store.bind(st.db)
	res, err := rebuildInto(ctx, st, agg, opts)
	if err != nil {
		return nil, err
	}
	res.Took = time.Since(start)
	return res, nil
}

// rebuildInto does Rebuild's work on an open store.
func rebuildInto(ctx context.Context, st *store, agg *aggregates, opts Options) (*RebuildResult, error) {
	res := &RebuildResult{}
	first, err := st.firstWALAtOrAfter(0)
	if err != nil {
		return nil, err
	}
	res.FirstEntry = first
	ck, state, err := st.loadCheckpoint()
	if err != nil {
		return nil, fmt.Errorf("load checkpoint from %s: %w", st.dir, err)
	}
	if ck == nil {
		if _, err := dropGenerations(st.db, func(uint64) bool { return true }); err != nil {
			return nil, fmt.Errorf("delete stored partials: %w", err)
		}
		return res, nil
	}
	var doc stateDoc
	if err := json.Unmarshal(state, &doc); err != nil {
		return nil, fmt.Errorf("%w: checkpoint state: %v", ErrCorrupt, err)
	}
	gen := uint64(1)
	if old, ok := doc.Consumers[AggregateConsumerName]; ok {
		g, _, err := splitAggSnapshot(old)
		if err != nil {
			return nil, err
		}
		gen = g + 1
	}
	if _, err := dropGenerations(st.db, func(g uint64) bool { return g == gen }); err != nil {
		return nil, fmt.Errorf("delete partials of an unfinished rebuild: %w", err)
	}
	agg.store.setGeneration(gen)
	if err := replayInto(ctx, st, agg, ck.Pos, opts, res); err != nil {
		return nil, err
	}
	snap, err := agg.Snapshot()
	if err != nil {
		return nil, err
	}
	if doc.Consumers == nil {
		doc.Consumers = map[string][]byte{}
	}
	doc.Consumers[AggregateConsumerName] = snap
	newState, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	if _, err := st.writeCheckpoint(ck, ck.Pos, newState, opts.Now().UnixNano()); err != nil {
		return nil, err
	}
	if _, err := dropGenerations(st.db, func(g uint64) bool { return g != gen }); err != nil {
		opts.Logger.Warn("deleting the old generation's partials failed; they only take space", "err", err)
	}
	res.Position, res.Generation = ck.Pos, gen
	return res, nil
}

// replayInto applies the log entries up to pos to the engine alone.
func replayInto(ctx context.Context, st *store, agg *aggregates, pos uint64, opts Options, res *RebuildResult) error {
	app := newApplier(newRegistry(), []Consumer{agg}, nil, opts.Limits)
	app.onPanic = func(name string, r any) {
		opts.Logger.Error("recovered panic in consumer", "consumer", name, "panic", r)
	}
	err := st.replay(0, func(e *walEntry) error {
		if e.seq > pos {
			return errStopScan
		}
		if res.Entries++; res.Entries%1024 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		if e.kind == entryBatch {
			res.Batches++
		}
		return app.applyEntry(e, nil)
	})
	if err != nil && !errors.Is(err, errStopScan) {
		return fmt.Errorf("replay log of %s: %w", st.dir, err)
	}
	res.Events = app.events
	return nil
}
