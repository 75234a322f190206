package uplink

import "time"

// wakeTimer is the send loop's alarm. It never calls Reset: from Go 1.23
// on, a Reset of a timer that sits in the runtime's heap marks it
// modified, and once the earliest modified time passes the scheduler scans
// the whole heap of its P (runtime.(*timers).adjust). With thousands of
// uplinks in one process (fleetsim), each re-arming for a linger or poll
// deadline several times per event, those scans took a tenth of the
// process's CPU. A replaced timer instead leaves a stopped one behind,
// which the runtime drops in bulk; the new one costs an allocation, and a
// heap push once the loop blocks on it.
//
// So that the loop makes few of those, a deadline at or after the armed
// one (less wakeSlack) keeps the armed timer: waking early costs the loop
// one pass, which then arms for what it still needs. Only an earlier
// deadline (a linger, a new ack timeout) replaces it.
type wakeTimer struct {
	t  *time.Timer
	at time.Time // when t fires; zero when no timer is armed
}

// wakeSlack is how much later than wanted the armed timer may fire and
// still be kept.
const wakeSlack = time.Millisecond

// set arms C to fire by at: it keeps the armed timer if that fires no
// later than at + wakeSlack, else it arms a new one for at.
func (w *wakeTimer) set(now, at time.Time) {
	if w.t != nil && !w.at.After(at.Add(wakeSlack)) {
		return
	}
	w.stop()
	w.t, w.at = time.NewTimer(at.Sub(now)), at
}

// C is the armed timer's channel, or nil (blocks forever) with none armed.
func (w *wakeTimer) C() <-chan time.Time {
	if w.t == nil {
		return nil
	}
	return w.t.C
}

// fired records that C delivered: nothing is armed until the next set.
func (w *wakeTimer) fired() { w.t, w.at = nil, time.Time{} }

// stop disarms the timer.
func (w *wakeTimer) stop() {
	if w.t != nil {
		w.t.Stop()
		w.fired()
	}
}
