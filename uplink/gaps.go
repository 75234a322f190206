package uplink

import (
	"time"

	"edgeflow/buffer"
	"edgeflow/wire/wirepb"
)

// Events the hub answered for without applying them are never freed in
// silence. There are two kinds:
//
//   - refused: the hub applied a batch without some of its events and its
//     ack names them (Ack.refused). The hub has recorded them as a gap
//     itself; the uplink records and counts them.
//   - rejected: the hub rejected a batch whole (one it could not read, or
//     a hub older than per-event refusals). The uplink records the range
//     as a gap with the hub's reason and reports it to the hub in the
//     gaps of the batches it sends next, as the buffer's own drops are
//     reported. Until a batch that carried the report is answered, the
//     buffer is not acknowledged past the range: an agent that restarts
//     meanwhile reads the range again and sends it again, so the report
//     cannot be lost with the process.

// maxRecentGaps bounds the gaps Status lists.
const maxRecentGaps = 16

// maxUnreported bounds the rejected ranges waiting to be reported; past
// it the two oldest merge (the reason of the newer one is kept), as the
// buffer bounds its pending gaps.
const maxUnreported = 64

// GapStatus is what Status says about events the hub did not apply.
type GapStatus struct {
	// Ranges and Events count the gaps recorded since the uplink started.
	Ranges int    `json:"ranges"`
	Events uint64 `json:"events"`
	// Unreported are rejected ranges not yet reported to the hub in a
	// batch it answered; the buffer keeps their events until they are.
	Unreported int `json:"unreported"`
	// Recent are the last gaps recorded, oldest first.
	Recent []GapRecord `json:"recent,omitempty"`
}

// GapRecord is one range of events the hub did not apply, and why:
// "refused:<reason>" for events the hub refused one by one, or
// "rejected:<reason>" for a batch it rejected whole (reason is the first
// word of the hub's answer).
type GapRecord struct {
	First  uint64    `json:"first_seq"`
	Last   uint64    `json:"last_seq"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

// Gap reason prefixes, as GapRecord and the hub's registry spell them.
const (
	gapRefused  = "refused:"
	gapRejected = "rejected:"
)

// recordGap notes one gap in the status and the metrics.
func (u *Uplink) recordGap(first, last uint64, reason string, now time.Time) {
	u.m.GapEvents.WithLabelValues(reason).Add(float64(last - first + 1))
	u.mu.Lock()
	defer u.mu.Unlock()
	g := &u.snap.Gaps
	g.Ranges++
	g.Events += last - first + 1
	if len(g.Recent) == maxRecentGaps {
		g.Recent = append(g.Recent[:0:0], g.Recent[1:]...)
	}
	g.Recent = append(g.Recent, GapRecord{First: first, Last: last, Reason: reason, At: now})
	g.Unreported = len(u.unreported)
}

// refusedInAck records the events an OK or DUPLICATE ack says the hub
// refused, within the batches fs it answers (a range outside them is not
// this stream's to record).
func (u *Uplink) refusedInAck(a *wirepb.Ack, fs []*flight, now time.Time) {
	if len(a.Refused) == 0 || len(fs) == 0 {
		return
	}
	lo, hi := fs[0].first, fs[len(fs)-1].last
	for _, r := range a.Refused {
		first, last := max(r.FirstSeq, lo), min(r.LastSeq, hi)
		if first > last {
			continue
		}
		reason := gapRefused + u.m.reasonLabel(r.Reason)
		u.recordGap(first, last, reason, now)
		u.warn(&u.rejLog, "uplink: the hub refused events; the rest of their batch was applied", "first", first, "last", last, "reason", r.Reason)
	}
}

// rejectedBatch records a batch the hub rejected whole as a gap to report.
func (u *Uplink) rejectedBatch(f *flight, reason string, now time.Time) {
	label := gapRejected + u.m.reasonLabel(reason)
	g := buffer.Gap{First: f.first, Last: f.last, Reason: label}
	i := len(u.unreported)
	for i > 0 && u.unreported[i-1].First > g.First {
		i--
	}
	u.unreported = append(u.unreported, buffer.Gap{})
	copy(u.unreported[i+1:], u.unreported[i:])
	u.unreported[i] = g
	if len(u.unreported) > maxUnreported {
		u.unreported[1].First = u.unreported[0].First
		u.unreported = append(u.unreported[:0], u.unreported[1:]...)
	}
	u.recordGap(f.first, f.last, label, now)
}

// reported forgets the rejected ranges that an answered batch's header
// carried (all those through upTo).
func (u *Uplink) reported(upTo uint64) {
	i := 0
	for i < len(u.unreported) && u.unreported[i].Last <= upTo {
		i++
	}
	if i == 0 {
		return
	}
	u.unreported = append(u.unreported[:0], u.unreported[i:]...)
	u.mu.Lock()
	u.snap.Gaps.Unreported = len(u.unreported)
	u.mu.Unlock()
}

// reportsUpTo is the last rejected range a batch starting at first
// reports in its header (0: none).
func (u *Uplink) reportsUpTo(first uint64) uint64 {
	var upTo uint64
	for _, g := range u.unreported {
		if g.Last < first {
			upTo = g.Last
		}
	}
	return upTo
}

// bufferTarget is how far the buffer may be acknowledged: through the
// answered prefix, but not past a rejected range not yet reported.
func (u *Uplink) bufferTarget() uint64 {
	t := u.answeredTo
	if len(u.unreported) > 0 && u.unreported[0].First <= t {
		t = u.unreported[0].First - 1
	}
	return t
}
