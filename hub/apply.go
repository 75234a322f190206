package hub

import (
	"fmt"
	"time"

	"edgeflow/hub/attrs"
	"edgeflow/hub/batchview"
	"edgeflow/hub/eventtime"
	"edgeflow/hub/hubapi"
	"edgeflow/hub/hublog"
	"edgeflow/hub/registry"
	"edgeflow/wire"
)

// applier applies durable log entries to the registry and the consumers, in
// log order, from one goroutine (or from recovery before that goroutine
// starts). It owns the reusable AppliedBatch and the string intern table.
type applier struct {
	reg       *registry.Registry
	consumers []Consumer
	estimator ClockEstimator
	limits    wire.Limits
	batch     AppliedBatch
	tags      []Tag
	intern    map[string]string
	attrs     *attrs.Table // nil: attribute entries change nothing (a rebuild without the table)
	// revise, when set, tells the engine about each attribute version
	// applied and the event times whose version it changed.
	revise  func(device string, v attrs.Version, ch attrs.Change, seq uint64)
	lastSeq uint64 // position of the last applied entry
	events  uint64 // events applied since start
	onPanic func(consumer string, r any)
	// own applies a KindOwn entry (own.go); nil outside cluster mode.
	own func(e *hublog.Entry) error
}

// maxInterned bounds the intern table; past it, names are allocated.
const maxInterned = 1 << 16

func newApplier(reg *registry.Registry, consumers []Consumer, est ClockEstimator, lim wire.Limits) *applier {
	return &applier{reg: reg, consumers: consumers, estimator: est, limits: lim, intern: map[string]string{}}
}

// str returns b as a string, shared with earlier identical names.
func (a *applier) str(b []byte) string {
	if s, ok := a.intern[string(b)]; ok {
		return s
	}
	s := string(b)
	if len(a.intern) < maxInterned {
		a.intern[s] = s
	}
	return s
}

// applyEntry applies one entry. v is its parsed batch when the caller has
// it (live path); nil makes applyEntry parse the stored payload (replay).
func (a *applier) applyEntry(e *hublog.Entry, v *batchview.View) error {
	switch e.Kind {
	case hublog.KindStatus:
		st, err := wire.DecodeStatus(e.Payload, wire.Limits{})
		if err != nil {
			return fmt.Errorf("%w: log entry %d: status: %v", hublog.ErrCorrupt, e.Seq, err)
		}
		a.reg.ApplyStatus(e, st)
		a.statusConsumers(e, st)
	case hublog.KindBatch:
		if v == nil {
			var err error
			if v, err = a.parseStored(e); err != nil {
				return err
			}
		}
		a.reg.ApplyBatch(e, v)
		a.feedConsumers(e, v)
	case hublog.KindTick:
		a.tickConsumers(time.Unix(0, e.ServerTimeNs), e.Seq)
	case hublog.KindRetire:
		a.retireStream(e)
	case hublog.KindAttrs:
		if err := a.applyAttrs(e); err != nil {
			return err
		}
	case hublog.KindOwn:
		if a.own == nil {
			return fmt.Errorf("%w: log entry %d: a partition ownership entry outside cluster mode", hublog.ErrCorrupt, e.Seq)
		}
		if err := a.own(e); err != nil {
			return err
		}
	default:
		return fmt.Errorf("%w: log entry %d: unknown kind %d", hublog.ErrCorrupt, e.Seq, e.Kind)
	}
	a.lastSeq = e.Seq
	return nil
}

// parseStored parses the batch payload of a stored entry.
func (a *applier) parseStored(e *hublog.Entry) (*batchview.View, error) {
	v := new(batchview.View)
	err := batchview.ParseBatchFrame(v, e.Payload, a.limits)
	if err == nil {
		return v, nil
	}
	return nil, fmt.Errorf("%w: log entry %d: batch: %v", hublog.ErrCorrupt, e.Seq, err)
}

// observe feeds the hub's clock estimator with a batch's timing; it runs in
// log order both live (before logging) and in replay (to warm it up).
func observe(est ClockEstimator, device string, sendTimeNs, serverTimeNs int64) {
	if est != nil && sendTimeNs != 0 {
		est.Observe(device, time.Unix(0, sendTimeNs), time.Unix(0, serverTimeNs))
	}
}

// Ticker is implemented by Consumers whose state depends on processing
// time (the event-time engine releases idle streams with it). The hub logs
// a tick every Options.TickInterval and calls Tick in log order, live and
// in replay, so the consumer's state stays a function of the log.
type Ticker interface {
	// Tick moves processing time to now (a logged server time).
	Tick(now time.Time)
}

// seqTicker is a Ticker that also takes the tick's log position, for
// state that must be idempotent under replay (see aggregate.Batch.Seq).
type seqTicker interface {
	TickAt(now time.Time, walSeq uint64)
}

// tickConsumers hands a logged tick (at log position seq) to the
// consumers that take ticks.
func (a *applier) tickConsumers(now time.Time, seq uint64) {
	for _, c := range a.consumers {
		switch t := c.(type) {
		case seqTicker:
			a.safeCall(c.Name(), func() { t.TickAt(now, seq) })
		case Ticker:
			a.safeCall(c.Name(), func() { t.Tick(now) })
		}
	}
}

// feedConsumers builds the AppliedBatch of e and hands it to each consumer.
func (a *applier) feedConsumers(e *hublog.Entry, v *batchview.View) {
	n := uint64(0)
	for _, r := range e.Fresh {
		n += r.Len()
	}
	for _, r := range e.Refused {
		n -= r.Len()
	}
	a.events += n
	if len(a.consumers) == 0 {
		return
	}
	b := a.build(e, v)
	for _, c := range a.consumers {
		a.safeApply(c, b)
	}
}

// build fills the reusable AppliedBatch with the fresh events of e that
// the hub did not refuse.
func (a *applier) build(e *hublog.Entry, v *batchview.View) *AppliedBatch {
	b := &a.batch
	*b = AppliedBatch{
		WALSeq: e.Seq, Device: e.Device, Stream: e.Stream, Ranges: e.AppliedRanges(),
		ServerTime: time.Unix(0, e.ServerTimeNs), SendTimeNs: v.SendTimeNs,
		Events: b.Events[:0],
	}
	if v.HasBacklog {
		b.Backlog = hubapi.Backlog{Events: v.Backlog.Events, Bytes: v.Backlog.Bytes, OldestNs: v.Backlog.OldestNs}
	}
	a.tags = a.tags[:0]
	evs := v.EventList()
	for _, r := range e.Fresh {
		for seq := r.First; seq <= r.Last && seq >= r.First; seq++ {
			i := seq - v.FirstSeq
			if i >= uint64(len(evs)) {
				break
			}
			if len(e.Refused) > 0 && e.RefusedAt(seq) {
				continue
			}
			b.Events = append(b.Events, a.event(seq, &evs[i], v, e.Est))
		}
	}
	return b
}

// safeApply calls c.Apply, recovering a panic so one bad batch or consumer
// bug does not stop the hub (the consumer's state may then lack the batch).
func (a *applier) safeApply(c Consumer, b *AppliedBatch) {
	a.safeCall(c.Name(), func() { c.Apply(b) })
}

// safeCall runs fn, recovering a panic of consumer name.
func (a *applier) safeCall(name string, fn func()) {
	defer func() {
		if r := recover(); r != nil && a.onPanic != nil {
			a.onPanic(name, r)
		}
	}()
	fn()
}

// event converts one parsed event, correcting its time.
func (a *applier) event(seq uint64, ev *batchview.EventView, v *batchview.View, est hublog.HubEstimate) AppliedEvent {
	out := AppliedEvent{
		Seq: seq, Metric: a.str(ev.Metric), Value: ev.Value, DeviceTimeNs: ev.DeviceTimeNs,
		EventTimeNs: ev.DeviceTimeNs, UncertaintyNs: ev.UncertaintyNs, Method: ev.Method,
	}
	if ev.TagHi > ev.TagLo {
		lo := len(a.tags)
		for _, t := range v.Tags[ev.TagLo:ev.TagHi] {
			a.tags = append(a.tags, Tag{Key: a.str(t.Key), Value: a.str(t.Value)})
		}
		out.Tags = a.tags[lo:len(a.tags):len(a.tags)]
	}
	out.EventTimeNs, out.UncertaintyNs, out.Method = eventtime.Correct(ev.DeviceTimeNs, ev.OffsetNs, ev.UncertaintyNs, ev.Method, est)
	return out
}
