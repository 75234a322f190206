package hub

import (
	"context"
	"edgeflow/hub/attrs"
	"edgeflow/hub/eventtime"
	"edgeflow/hub/hublog"
	"edgeflow/hub/registry"
	"edgeflow/hub/rules"
	"encoding/json"
	"fmt"
	"slices"
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
	// FromLog says no stored checkpoint was usable (each was damaged):
	// the registry and the engine were rebuilt from the whole log, and
	// Position is the newest entry's.
	FromLog bool
	// DamagedPositions counts log positions that could not be read and
	// were skipped with the loss recorded (Options.RecoverDamaged).
	DamagedPositions uint64
	// Alerts counts the alerts the rules hold after the rebuild (0
	// without Options.Rules); AlertsChanged says they differ from the
	// checkpoint's (ids, revisions, change sequences), so the alert
	// outputs' positions were moved to AlertSeq, the rebuilt sequence.
	Alerts        int
	AlertsChanged bool
	AlertSeq      uint64
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
// deleted and the next start recomputes everything from the log. A
// damaged checkpoint is passed over for the one before it; when none is
// usable the registry and the engine are rebuilt from the whole log and
// written as a new checkpoint at its end. Unreadable log entries stop the
// rebuild with a *LogDamageError unless opts.RecoverDamaged, which skips
// them and records the loss as the hub does at start.
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
	st, err := hublog.OpenStore(opts.DataDir, true, opts.Logger)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	if err := eventtime.EnsureIndex(st, opts.Limits, opts.Logger); err != nil {
		return nil, fmt.Errorf("hub store %s: %w", st.Dir, err)
	}
	agg.store.Bind(st.DB)
	res, err := rebuildInto(ctx, st, agg, opts)
	if err != nil {
		return nil, err
	}
	res.Took = time.Since(start)
	return res, nil
}

// rebuildInto does Rebuild's work on an open store.
func rebuildInto(ctx context.Context, st *hublog.Store, agg *aggregates, opts Options) (*RebuildResult, error) {
	res := &RebuildResult{}
	first, err := st.FirstWALAtOrAfter(0)
	if err != nil {
		return nil, err
	}
	res.FirstEntry = first
	records, err := st.LoadDamageRecords()
	if err != nil {
		return nil, err
	}
	all, err := st.LoadCheckpoints()
	if err != nil {
		return nil, fmt.Errorf("load checkpoint from %s: %w", st.Dir, err)
	}
	var ck *hublog.Checkpoint
	var doc stateDoc
	for _, sc := range all {
		if sc.Err == nil {
			if err := json.Unmarshal(sc.State, &doc); err != nil {
				sc.Err = fmt.Errorf("%w: state: %v", hublog.ErrCheckpointDamaged, err)
			}
		}
		if sc.Err == nil {
			ck = sc.Checkpoint
			break
		}
		opts.Logger.Error("checkpoint damaged; using the one before it, else the whole log", "dir", st.Dir, "key", sc.Key, "err", sc.Err)
	}
	if ck == nil && len(all) == 0 {
		if _, err := hublog.DropGenerations(st.DB, func(uint64) bool { return true }); err != nil {
			return nil, fmt.Errorf("delete stored partials: %w", err)
		}
		return res, nil
	}
	gen, found, err := hublog.MaxPartialGeneration(st.DB)
	if err != nil {
		return nil, err
	}
	if !found {
		gen = 0
	}
	if ck != nil {
		if old, ok := doc.Consumers[AggregateConsumerName]; ok {
			g, _, err := splitAggSnapshot(old)
			if err != nil {
				return nil, err
			}
			gen = max(gen, g)
		}
	}
	gen++
	if _, err := hublog.DropGenerations(st.DB, func(g uint64) bool { return g == gen }); err != nil {
		return nil, fmt.Errorf("delete partials of an unfinished rebuild: %w", err)
	}
	agg.store.SetGeneration(gen)
	reg := registry.New(opts.MaxStreamsPerDevice)
	var pos uint64
	if ck != nil {
		pos = ck.Pos
	}
	var rc *alertsConsumer
	if len(opts.Rules) > 0 {
		if rc, err = newAlertsConsumer(agg.eng, &opts); err != nil {
			return nil, err
		}
	}
	app, err := replayInto(ctx, st, agg, rc, reg, ck == nil, pos, records, opts, res)
	if err != nil {
		return nil, err
	}
	if ck == nil {
		res.FromLog, pos = true, app.lastSeq
		if doc.Registry, err = reg.Snapshot(); err != nil {
			return nil, err
		}
		if doc.Consumers == nil {
			doc.Consumers = map[string][]byte{}
		}
		doc.Consumers[AttrsConsumerName] = app.attrs.Snapshot() // the attribute table, from the log too
	}
	snap, err := agg.Snapshot()
	if err != nil {
		return nil, err
	}
	if doc.Consumers == nil {
		doc.Consumers = map[string][]byte{}
	}
	doc.Consumers[AggregateConsumerName] = snap
	if rc != nil {
		if err := rebuildAlerts(st, rc, doc.Consumers, opts, res); err != nil {
			return nil, err
		}
	}
	newState, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	// Written twice, so both retained checkpoints use the new generation
	// of partials (the old one is deleted below).
	st.RetainedCheckpoints()
	for i := 0; i < 2; i++ {
		if _, err := st.WriteCheckpoint(pos, newState, opts.Now().UnixNano()); err != nil {
			return nil, err
		}
	}
	if _, err := hublog.DropGenerations(st.DB, func(g uint64) bool { return g != gen }); err != nil {
		opts.Logger.Warn("deleting the old generation's partials failed; they only take space", "err", err)
	}
	res.Position, res.Generation = pos, gen
	return res, nil
}

// replayInto applies the log entries up to pos (the whole log when full)
// to the engine, the rules (rc, when not nil) and, when full, to reg. Damage stops it unless
// opts.RecoverDamaged, which records the loss.
func replayInto(ctx context.Context, st *hublog.Store, agg *aggregates, rc *alertsConsumer, reg *registry.Registry, full bool, pos uint64, records []hublog.DamageRecord, opts Options, res *RebuildResult) (*applier, error) {
	known := hublog.LossesOf(records)
	consumers := []Consumer{agg}
	if rc != nil {
		consumers = append(consumers, rc) // after the engine, as in the hub
	}
	app := newApplier(reg, consumers, nil, opts.Limits)
	// The attribute entries replay into a table of their own, so the
	// engine gets the same revisions it got live; the checkpoint's table
	// stays unless there is no checkpoint.
	app.attrs, app.revise = attrs.New(attrs.Limits{}), engineReviser(agg.eng)
	app.onPanic = func(name string, r any) {
		opts.Logger.Error("recovered panic in consumer", "consumer", name, "panic", r)
	}
	app.own = func(e *hublog.Entry) error {
		_, _, err := applyOwnTo(reg, agg.eng, app.attrs, e, opts.NATS.Log.Partitions, opts.Logger)
		return err
	}
	upTo := pos
	if full {
		upTo = 0
	} else if pos == 0 {
		return app, nil
	}
	dmg, err := st.ReplayChecked(0, upTo, !full, &known.Positions, func(e *hublog.Entry) error {
		if res.Entries++; res.Entries%1024 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		if e.Kind == hublog.KindBatch {
			res.Batches++
		}
		return app.applyEntry(e, nil)
	})
	if err != nil {
		return nil, fmt.Errorf("replay log of %s: %w", st.Dir, err)
	}
	if !full {
		// The entries after the checkpoint are the next start's replay:
		// damage there is reported now, with the same choices.
		after, err := st.ReplayChecked(pos, 0, false, &known.Positions, func(*hublog.Entry) error { return nil })
		if err != nil {
			return nil, fmt.Errorf("read log of %s: %w", st.Dir, err)
		}
		dmg.Merge(after)
	}
	res.Events = app.events
	if !dmg.Any() {
		if full {
			reg.ApplyLosses(records)
		}
		return app, nil
	}
	devices := st.DevicesAt(&dmg.Positions)
	if !opts.RecoverDamaged {
		return nil, dmg.Err(st.Dir, devices)
	}
	var lost []hublog.LostStream
	if full {
		dedup, err := st.LoadDedup()
		if err != nil {
			return nil, err
		}
		lost = reg.LostSince(dedup, known)
	}
	rec := hublog.NewDamageRecord(opts.Now().UnixNano(), dmg, devices, lost)
	if err := st.WriteDamageRecord(rec, dmg.Unreadable); err != nil {
		return nil, err
	}
	if full {
		reg.ApplyLosses(append(records, *rec))
	}
	res.DamagedPositions = dmg.Positions.Count()
	opts.Logger.Error("hub store damaged: rebuilt without the unreadable log entries (recover-damaged); the loss is recorded",
		"dir", st.Dir, "positions", hublog.FormatRanges(&dmg.Positions), "devices", devices, "streams", len(lost))
	return app, nil
}

// rebuildAlerts puts the rebuilt rules state into the checkpoint's
// consumers. When the alerts differ from the checkpoint's (other rules,
// or log entries retention deleted), the old change sequences name other
// changes: the alert-change log is cleared and every stored output
// position set to the rebuilt sequence, so outputs send the changes made
// after the checkpoint position and none of the old ones twice.
func rebuildAlerts(st *hublog.Store, rc *alertsConsumer, consumers map[string][]byte, opts Options, res *RebuildResult) error {
	snap, err := rc.Snapshot()
	if err != nil {
		return err
	}
	res.Alerts, res.AlertSeq = len(rc.ev.Since(0, 0)), rc.ev.Seq()
	res.AlertsChanged = true
	if old, ok := consumers[RulesConsumerName]; ok {
		if prev, err := newAlertsConsumer(rc.eng, &opts); err == nil && prev.Restore(old) == nil {
			res.AlertsChanged = prev.ev.Seq() != rc.ev.Seq() || !slices.EqualFunc(prev.ev.Since(0, 0), rc.ev.Since(0, 0), sameAlert)
			prev.sub.Close()
		}
	}
	consumers[RulesConsumerName] = snap
	if res.AlertsChanged {
		return st.ResetAlertOutputs(res.AlertSeq)
	}
	return nil
}

// sameAlert compares two alerts field by field, change sequence included.
func sameAlert(a, b rules.Alert) bool {
	return a.ID == b.ID && a.Revision == b.Revision && a.Seq == b.Seq && a.State == b.State && a.Value == b.Value &&
		a.Start.Equal(b.Start) && a.End.Equal(b.End) && a.FiredAt.Equal(b.FiredAt)
}
