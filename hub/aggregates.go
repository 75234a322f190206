package hub

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"edgeflow/aggregate"
	"edgeflow/hub/hublog"
	"edgeflow/internal/lograte"
	"edgeflow/wire/wirepb"
)

// AggregateConsumerName is the name of the event-time engine's snapshot in
// the hub's checkpoint.
const AggregateConsumerName = "aggregate"

// aggSnapshotVersion starts the engine's checkpoint entry: version, the
// partial store's generation (uvarint), then aggregate.Engine.Snapshot.
const aggSnapshotVersion = 1

// aggregates feeds the event-time engine from the applier: it is a
// Consumer and a Ticker. The engine has its own lock, so queries run
// concurrently with Apply; Apply, Tick, Snapshot and Restore all come from
// the applier's goroutine (or recovery, before it starts).
type aggregates struct {
	eng   *aggregate.Engine
	store *hublog.BadgerPartials
	log   *slog.Logger
	rates map[error]*rateLog // one rate-limited log line per kind of held or dropped events
	now   time.Time          // processing time of the tick being applied (engine's Clock)
	evs   []aggregate.Event
	tags  []aggregate.Tag
}

// newAggregates builds the engine with the Badger store (bound later) and
// a clock that only logged ticks move.
func newAggregates(opt aggregate.Options, log *slog.Logger, now func() time.Time) (*aggregates, error) {
	a := &aggregates{store: hublog.NewBadgerPartials(), log: log, rates: map[error]*rateLog{}}
	for _, kind := range []error{nil, aggregate.ErrSeriesLimit, aggregate.ErrQuarantineFull, aggregate.ErrQuarantined, aggregate.ErrPartialsLimit} {
		a.rates[kind] = &rateLog{lim: lograte.Limiter{Every: time.Minute}, now: now}
	}
	opt.Store = a.store
	opt.Clock = func() time.Time { return a.now }
	eng, err := aggregate.New(opt)
	if err != nil {
		return nil, err
	}
	a.eng = eng
	return a, nil
}

// Name implements Consumer.
func (a *aggregates) Name() string { return AggregateConsumerName }

// Apply implements Consumer: it converts the batch and applies it, then
// writes what the engine evicted.
func (a *aggregates) Apply(b *AppliedBatch) {
	a.evs, a.tags = a.evs[:0], a.tags[:0]
	for i := range b.Events {
		e := &b.Events[i]
		lo := len(a.tags)
		for _, t := range e.Tags {
			a.tags = append(a.tags, aggregate.Tag{Key: t.Key, Value: t.Value})
		}
		a.evs = append(a.evs, aggregate.Event{
			Seq: e.Seq, Metric: e.Metric, Value: e.Value, Time: e.EventTimeNs, Uncertainty: e.UncertaintyNs,
			Untrusted: e.Method == wirepb.TimeMethod_TIME_METHOD_UNTRUSTED,
			Tags:      a.tags[lo:len(a.tags):len(a.tags)],
		})
	}
	ab := aggregate.Batch{Seq: b.WALSeq, Device: b.Device, Stream: aggregate.StreamID(b.Stream),
		ServerTime: b.ServerTime.UnixNano(), Backlog: draining(b), Events: a.evs}
	a.report(b.Device, a.eng.Apply(&ab))
	a.report(b.Device, a.eng.Held())
	a.flush()
}

// heldMessages are the log lines of the engine's errors, by sentinel.
var heldMessages = map[error]string{
	nil:                         "events dropped by the aggregate engine",
	aggregate.ErrSeriesLimit:    "events of new series dropped by the aggregate engine: series limit reached",
	aggregate.ErrQuarantineFull: "held events dropped: the aggregate quarantine is full",
	aggregate.ErrQuarantined:    "future-stamped events held in the aggregate quarantine",
	aggregate.ErrPartialsLimit:  "events held in the aggregate quarantine: max_live_partials reached",
}

// report logs each cause joined in err, at most once a minute per cause.
func (a *aggregates) report(device string, err error) {
	if err == nil {
		return
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	for _, e := range errs {
		var kind error
		for k := range heldMessages {
			if k != nil && errors.Is(e, k) {
				kind = k
			}
		}
		a.rates[kind].log(a.log, "aggregate", device, heldMessages[kind], e)
	}
}

// drainingBacklogAge is how old (by the device's own clock, at send time)
// the oldest unacknowledged event must be for a stream to count as draining
// a backlog. A live agent always holds a batch or two in flight, so "any
// backlog" would release every stream from the hub watermark and make
// ordinary events late.
const drainingBacklogAge = 30 * time.Second

// draining reports whether a batch comes from an agent catching up on a
// backlog, which must not hold the hub watermark back. It uses only the
// batch, so a replay or rebuild decides the same way.
func draining(b *AppliedBatch) bool {
	if b.Backlog.Events == 0 || b.Backlog.OldestNs == 0 {
		return false
	}
	return b.SendTimeNs-b.Backlog.OldestNs > int64(drainingBacklogAge)
}

// Tick implements Ticker.
func (a *aggregates) Tick(now time.Time) { a.TickAt(now, 0) }

// TickAt implements seqTicker: held events released by the tick carry its
// log position, so a replay skips those a stored partial already holds.
func (a *aggregates) TickAt(now time.Time, walSeq uint64) {
	a.now = now
	a.report("", a.eng.TickSeq(walSeq))
	a.report("", a.eng.Held())
	a.flush()
}

func (a *aggregates) flush() {
	if err := a.store.Flush(); err != nil {
		a.rates[nil].log(a.log, "aggregate", "", "writing evicted partials failed; they stay in memory and are retried", err)
	}
}

// Snapshot implements Consumer.
func (a *aggregates) Snapshot() ([]byte, error) {
	if err := a.store.Flush(); err != nil {
		return nil, err
	}
	snap, err := a.eng.Snapshot()
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(snap)+11)
	out = append(out, aggSnapshotVersion)
	out = binary.AppendUvarint(out, a.store.Generation())
	return append(out, snap...), nil
}

// Restore implements Consumer.
func (a *aggregates) Restore(b []byte) error {
	gen, snap, err := splitAggSnapshot(b)
	if err != nil {
		return err
	}
	a.store.SetGeneration(gen)
	if err := a.eng.Restore(snap); err != nil {
		if errors.Is(err, aggregate.ErrIncompatibleSnapshot) {
			return fmt.Errorf("%w; run `hubd rebuild` with the new configuration to recompute the aggregates from the log", err)
		}
		return err
	}
	return nil
}

// splitAggSnapshot reads the header of the engine's checkpoint entry.
func splitAggSnapshot(b []byte) (gen uint64, snap []byte, err error) {
	if len(b) < 2 || b[0] != aggSnapshotVersion {
		return 0, nil, fmt.Errorf("%w: aggregate snapshot: unknown version", hublog.ErrCorrupt)
	}
	gen, n := binary.Uvarint(b[1:])
	if n <= 0 {
		return 0, nil, fmt.Errorf("%w: aggregate snapshot: bad generation", hublog.ErrCorrupt)
	}
	return gen, b[1+n:], nil
}

// Engine returns the hub's event-time engine, or nil when
// Options.Aggregate is nil. Query it freely; feeding it is the hub's job.
func (s *Server) Engine() *aggregate.Engine {
	if s.agg == nil {
		return nil
	}
	return s.agg.eng
}
