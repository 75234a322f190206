package uplink

import "time"

// maxFastResendGrace caps fastResendGrace.
const maxFastResendGrace = time.Second

// fastResendGrace is how long a batch shown lost (fastResend) still waits
// for its answer before it is published again: a tenth of AckTimeout, at
// most a second. The hub publishes acks with several publishes in flight,
// so an answer can arrive just after the answer to a later batch; the
// grace lets it, rather than resending a batch the hub has.
func (u *Uplink) fastResendGrace() time.Duration {
	return min(u.opts.AckTimeout/10, maxFastResendGrace)
}

// fastResend moves up the resend of the batches an answer shows were lost
// on the way. The answer for the batches fs (OK, DUPLICATE or REJECTED:
// the hub read them) shows the hub has read every publish the device made
// before the first publish of any of them: the broker delivers one
// client's QoS 1 messages in order, and the hub reads a device's batches
// in that order (hubd's decode workers are chosen by device; in cluster
// mode the stream keeps the order the MQTT listener stored them in). A
// batch still unanswered whose last publish came before that point was
// lost between the broker's PUBACK and the hub (JetStream loses messages
// it had acknowledged when a killed server takes them out of a leader
// election), or its answer was lost or is late. Its deadline becomes
// fastResendGrace from now instead of its ack timeout.
//
// The rule is bounded, so that a hub that reorders a device's batches or
// answers (several hubs on a shared subscription; acks published
// concurrently) costs at most a duplicate, which the hub answers
// DUPLICATE, and never a storm: a batch's resend is moved up at most once
// per AckTimeout, only on an answer to a batch first published after its
// own last publish (so its resend needs fresh evidence before it can be
// moved up again), never while it is queued, and never after a
// RETRY_LATER answer to its last publish (the hub read it and asked to
// wait; that delay stands). A resend moved up this way still doubles the
// batch's next ack timeout; batches this rule does not cover wait for
// their timeout as before.
func (u *Uplink) fastResend(fs []*flight, now time.Time) {
	var seen uint64 // the latest first publish among the answered batches
	for _, f := range fs {
		seen = max(seen, f.firstPub)
	}
	due := now.Add(u.fastResendGrace())
	for _, g := range u.win.q {
		if g.firstPub >= seen {
			// First publishes follow the window's order (pump publishes
			// oldest first and stops at the first batch it cannot send),
			// so no later batch was first published before seen either.
			break
		}
		if g.done || g.queued || g.sends == 0 || g.later || g.lastPub >= seen || !due.Before(g.deadline) {
			continue
		}
		if !g.fastAt.IsZero() && now.Sub(g.fastAt) < u.opts.AckTimeout {
			continue
		}
		g.deadline, g.fastAt, g.fast = due, now, true
	}
}
