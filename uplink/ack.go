package uplink

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"time"

	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// handleAck applies one payload from the ack topic to the window. It
// returns the new cumulative position to ack the buffer through, if the
// answered prefix grew. Anything that is not a well-formed answer for a
// batch (or run of batches) in flight of this stream is counted and
// ignored: duplicate answers to resends are normal, and a stranger's
// payload must never free events.
func (u *Uplink) handleAck(payload []byte, now time.Time) (uint64, bool) {
	a, err := wire.DecodeAck(payload, wire.Limits{})
	if err != nil {
		u.m.AcksIgnored.WithLabelValues("malformed").Inc()
		u.warn(&u.warnLog, "uplink: malformed ack ignored", "err", err)
		return 0, false
	}
	ours := bytes.Equal(a.StreamId, u.sid[:])
	var f *flight
	if ours {
		f = u.win.find(a.FirstSeq, a.LastSeq)
	}
	// A hub that could not read a batch at all answers without its stream
	// (all zeros).
	unread := len(bytes.Trim(a.StreamId, "\x00")) == 0
	if (ours || unread) && u.columnsRefused(f, a.Status, a.Reason) {
		return 0, false
	}
	if !ours {
		// An old stream of this device (a re-flashed buffer) or a stranger.
		u.m.AcksIgnored.WithLabelValues("foreign_stream").Inc()
		return 0, false
	}
	fs := u.answered(f, a)
	if len(fs) == 0 {
		u.m.AcksIgnored.WithLabelValues("unmatched").Inc()
		return 0, false
	}
	switch a.Status {
	case wirepb.AckStatus_ACK_STATUS_OK:
		u.m.BatchesAcked.WithLabelValues("ok").Add(float64(len(fs)))
		u.answeredOK(a, fs, now)
	case wirepb.AckStatus_ACK_STATUS_DUPLICATE:
		u.m.BatchesAcked.WithLabelValues("duplicate").Add(float64(len(fs)))
		u.answeredOK(a, fs, now)
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
		u.warn(&u.rejLog, "uplink: hub rejected a batch; its range is recorded as a gap and reported to the hub", "first", a.FirstSeq, "last", a.LastSeq, "reason", a.Reason)
		u.rejectedBatch(fs[0], a.Reason, now)
	default:
		u.m.AcksIgnored.WithLabelValues("bad_status").Inc()
		u.warn(&u.warnLog, "uplink: ack with unknown status ignored", "status", a.Status, "first", a.FirstSeq)
		return 0, false
	}
	for _, f := range fs {
		f.done, f.payload = true, nil
		u.m.EventsAcked.Add(float64(f.events()))
		if f.sends > 0 {
			u.m.AckLatency.Observe(now.Sub(f.sent).Seconds())
		}
	}
	u.fastResend(fs, now)
	before := u.win.len()
	upTo, ok := u.win.popDone()
	u.m.InFlight.Sub(float64(before - u.win.len()))
	if ok {
		u.answeredTo = upTo
		if u.opts.OnAck != nil {
			u.opts.OnAck(upTo, a.ServerTimeNs)
		}
	}
	// The buffer frees the answered prefix, short of a rejected range
	// the hub has not heard of yet (gaps.go).
	target := u.bufferTarget()
	advanced := target > u.bufAcked
	if advanced {
		u.bufAcked = target
	}
	u.noteAck(target, advanced, u.opts.Now())
	return target, advanced
}

// answeredOK handles an OK or DUPLICATE answer for the batches fs: the
// events it says the hub refused, and the rejected ranges their headers
// reported.
func (u *Uplink) answeredOK(a *wirepb.Ack, fs []*flight, now time.Time) {
	u.refusedInAck(a, fs, now)
	for _, f := range fs {
		if f.reports > 0 {
			u.reported(f.reports)
		}
	}
}

// answered returns the batches in flight that ack a answers and that were
// not answered before: f, the batch with a's exact range, or, for an OK or
// DUPLICATE answer, the run of batches that covers a's range exactly (a hub
// answers a run of batches with one ack, as their range_acks allows).
func (u *Uplink) answered(f *flight, a *wirepb.Ack) []*flight {
	var fs []*flight
	switch {
	case f != nil:
		fs = []*flight{f}
	case wire.RunAckStatus(a.Status):
		fs = u.win.run(nil, a.FirstSeq, a.LastSeq)
	}
	return slices.DeleteFunc(fs, func(f *flight) bool { return f.done })
}

// columnsRefused handles a hub that cannot read a columnar batch. A hub
// older than the codec answers every such batch "malformed: ... unknown
// codec 3", without the batch's stream (it could not read it): then every
// columnar batch in flight is rewritten as zstd and published again, and
// the uplink sends zstd until it restarts. A current hub that refuses one
// columnar batch as malformed gets that batch again as zstd before it is
// dropped (and the next batches go as columns still), so a fault in either
// end's columns loses nothing that protobuf can carry. It reports whether
// it handled the answer; f may be nil (the answer matched no batch in
// flight).
func (u *Uplink) columnsRefused(f *flight, status wirepb.AckStatus, reason string) bool {
	if status != wirepb.AckStatus_ACK_STATUS_REJECTED || !strings.HasPrefix(reason, "malformed") {
		return false
	}
	var fs []*flight
	oldHub := strings.Contains(reason, unknownColumns)
	switch {
	case oldHub:
		for _, g := range u.win.q {
			if !g.done && columnar(g) {
				fs = append(fs, g)
			}
		}
	case f != nil && !f.done && columnar(f):
		fs = []*flight{f}
	}
	if len(fs) == 0 {
		return false
	}
	for _, g := range fs {
		body, err := wire.Unframe(wire.MsgBatch, g.payload, wire.Limits{})
		if err != nil {
			continue // not a frame this uplink could have made
		}
		g.payload, g.queued = wire.FrameWith(wire.MsgBatch, wire.CodecZstd, body), true
		u.m.CodecFallbacks.Inc()
	}
	switch {
	case oldHub && u.codec == wire.CodecColumns:
		u.codec = wire.CodecZstd
		u.log.Warn("uplink: the hub cannot read columnar batches (older than the codec); sending zstd until restarted",
			"batches", len(fs), "reason", reason)
	case !oldHub:
		u.warn(&u.rejLog, "uplink: the hub refused a columnar batch as malformed; sending it again as zstd",
			"first", f.first, "last", f.last, "reason", reason)
	}
	return true
}

// unknownColumns is how a hub older than the columnar codec names it in
// its rejection (wire's "unknown codec" error).
var unknownColumns = fmt.Sprintf("unknown codec %d", wire.CodecColumns)

// columnar says whether a batch in flight is framed as columns.
func columnar(f *flight) bool {
	return len(f.payload) > 2 && wire.Codec(f.payload[2]) == wire.CodecColumns
}
