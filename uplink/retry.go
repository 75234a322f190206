package uplink

import (
	"math/rand/v2"
	"time"
)

// retryLater handles a RETRY_LATER answer for the batch f: the hub did not
// apply it (the device is over its rate limit, or the hub is overloaded)
// but nothing is wrong with it. The batch stays in the window, unanswered,
// so the buffer is never acked through it, and is published again once
// its deadline passes: no sooner than the hub's hint, and after a delay
// that grows with the batch's publishes as the reconnect backoff does
// (retryDelay), so a fleet told to wait does not come back in one wave.
func (u *Uplink) retryLater(f *flight, hint time.Duration, now time.Time) {
	u.m.BatchesAcked.WithLabelValues("retry_later").Inc()
	d := retryDelay(max(f.sends-1, 0), hint, u.opts.BackoffMin, u.opts.BackoffMax, u.rnd)
	f.queued, f.later, f.fast = false, true, false
	f.deadline = now.Add(d)
	u.warn(&u.rejLog, "uplink: hub asked to resend a batch later", "first", f.first, "last", f.last, "after", d)
}

// retryDelay is the wait before resending a batch that got RETRY_LATER
// after its attempt-th resend: at least hint (capped at hi), and uniform in
// [c/2, c] with c the reconnect backoff's ceiling for attempt. Half the
// ceiling is a floor, unlike the reconnect's full jitter, so a device over
// its rate limit cannot spin on immediate resends.
func retryDelay(attempt int, hint, lo, hi time.Duration, rnd *rand.Rand) time.Duration {
	c := backoffCeiling(attempt, lo, hi)
	d := c/2 + time.Duration(rnd.Int64N(int64(c-c/2)+1))
	return max(d, min(hint, hi))
}
