package uplink

import (
	"bytes"
	"time"

	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// handleAck applies one payload from the ack topic to the window. It
// returns the new cumulative position to ack the buffer through, if the
// answered prefix grew. Anything that is not a well-formed answer for a
// batch in flight of this stream is counted and ignored: duplicate answers
// to resends are normal, and a stranger's payload must never free events.
func (u *Uplink) handleAck(payload []byte, now time.Time) (uint64, bool) {
	a, err := wire.DecodeAck(payload, wire.Limits{})
	if err != nil {
		u.m.AcksIgnored.WithLabelValues("malformed").Inc()
		u.warn(&u.warnLog, "uplink: malformed ack ignored", "err", err)
		return 0, false
	}
	if !bytes.Equal(a.StreamId, u.sid[:]) {
		// An old stream of this device (a re-flashed buffer) or a stranger.
		u.m.AcksIgnored.WithLabelValues("foreign_stream").Inc()
		return 0, false
	}
	f := u.win.find(a.FirstSeq, a.LastSeq)
	if f == nil || f.done {
		u.m.AcksIgnored.WithLabelValues("unmatched").Inc()
		return 0, false
	}
	switch a.Status {
	case wirepb.AckStatus_ACK_STATUS_OK:
		u.m.BatchesAcked.WithLabelValues("ok").Inc()
	case wirepb.AckStatus_ACK_STATUS_DUPLICATE:
		u.m.BatchesAcked.WithLabelValues("duplicate").Inc()
	case wirepb.AckStatus_ACK_STATUS_RETRY_LATER:
		// Not applied, and not the batch's fault: it stays in flight, is
		// published again later and never frees its events until then.
		u.retryLater(f, time.Duration(a.RetryAfterNs), now)
		return 0, false
	case wirepb.AckStatus_ACK_STATUS_REJECTED:
		// The hub records the rejection; the range is done so that one bad
		// batch never blocks the stream behind it.
		u.m.BatchesAcked.WithLabelValues("rejected").Inc()
		u.m.Rejected.WithLabelValues(u.m.reasonLabel(a.Reason)).Inc()
		u.warn(&u.rejLog, "uplink: hub rejected a batch", "first", a.FirstSeq, "last", a.LastSeq, "reason", a.Reason)
	default:
		u.m.AcksIgnored.WithLabelValues("bad_status").Inc()
		u.warn(&u.warnLog, "uplink: ack with unknown status ignored", "status", a.Status, "first", a.FirstSeq)
		return 0, false
	}
	f.done, f.payload = true, nil
	u.m.EventsAcked.Add(float64(f.events()))
	if f.sends > 0 {
		u.m.AckLatency.Observe(now.Sub(f.sent).Seconds())
	}
	before := u.win.len()
	upTo, ok := u.win.popDone()
	u.m.InFlight.Sub(float64(before - u.win.len()))
	u.noteAck(upTo, ok, u.opts.Now())
	if ok && u.opts.OnAck != nil {
		u.opts.OnAck(upTo, a.ServerTimeNs)
	}
	return upTo, ok
}
