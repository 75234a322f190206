package aggregate

import (
	"slices"
	"time"
)

// lateRec is one event that arrived beyond the late horizon.
type lateRec struct {
	stream           uint32
	seq              uint64
	metric           string
	tags             []Tag
	value            float64
	t, arrived, wmAt int64
}

// LateEvent is an event that arrived after its window's late horizon: it
// is not in any aggregate, and is kept here (bounded) for inspection.
type LateEvent struct {
	// Offset is the event's position in the late log.
	Offset uint64
	Device string
	Stream StreamID
	Seq    uint64
	Metric string
	Tags   []Tag
	Value  float64
	// Time is the event time; Arrived the batch's server time; Watermark
	// the hub watermark at arrival.
	Time, Arrived, Watermark time.Time
}

func (e *Engine) logTooLate(b *Batch, si uint32, ev *Event, wm int64) {
	e.logTooLateAt(b.ServerTime, si, ev, wm)
}

// logTooLateAt is logTooLate for an event whose batch arrived at arrived.
func (e *Engine) logTooLateAt(arrived int64, si uint32, ev *Event, wm int64) {
	e.stats.tooLate++
	e.lateLog.push(lateRec{
		stream: si, seq: ev.Seq, metric: ev.Metric,
		tags:  slices.Clone(e.series.canonical(ev.Tags)),
		value: ev.Value, t: ev.Time, arrived: arrived, wmAt: wm,
	})
}

// LateEvents returns up to max entries of the late log from offset from,
// and the offset to read next (ErrOffsetTooOld as for ReadStream).
func (e *Engine) LateEvents(from uint64, max int) ([]LateEvent, uint64, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	var out []LateEvent
	next, err := e.lateLog.read(from, max, func(off uint64, r *lateRec) {
		st := &e.streams[r.stream]
		out = append(out, LateEvent{
			Offset: off, Device: st.device, Stream: st.id, Seq: r.seq, Metric: r.metric,
			Tags: r.tags, Value: r.value, Time: ts(r.t), Arrived: ts(r.arrived), Watermark: ts(r.wmAt),
		})
	})
	return out, next, err
}
