package uplink

import (
	"testing"
	"time"
)

func TestWakeTimer(t *testing.T) {
	var w wakeTimer
	if w.C() != nil {
		t.Fatal("an unarmed wakeTimer has a channel")
	}
	now := time.Now()
	w.set(now, now.Add(time.Hour))
	first := w.t
	w.set(now, now.Add(time.Hour+wakeSlack/2)) // about the same: the armed timer stays
	if w.t != first || !w.at.Equal(now.Add(time.Hour)) {
		t.Fatalf("a deadline within the slack replaced the armed timer (at %v)", w.at.Sub(now))
	}
	w.set(now, now.Add(2*time.Hour)) // later: the armed timer wakes the loop early, and stays
	if w.t != first || !w.at.Equal(now.Add(time.Hour)) {
		t.Fatalf("a later deadline replaced the armed timer (at %v)", w.at.Sub(now))
	}
	w.set(now, now.Add(time.Hour-2*wakeSlack)) // earlier: a new timer
	if w.t == first || !w.at.Equal(now.Add(time.Hour-2*wakeSlack)) {
		t.Fatalf("an earlier deadline kept the armed timer (at %v)", w.at.Sub(now))
	}
	if first.Stop() {
		t.Fatal("the replaced timer was still running")
	}
	second := w.t
	w.set(now, now.Add(time.Millisecond)) // earlier: a new timer
	if w.t == second || !w.at.Equal(now.Add(time.Millisecond)) {
		t.Fatalf("an earlier deadline kept the armed timer (at %v)", w.at.Sub(now))
	}
	select {
	case <-w.C():
		w.fired()
	case <-time.After(10 * time.Second):
		t.Fatal("the armed timer never fired")
	}
	if w.C() != nil || !w.at.IsZero() {
		t.Fatal("still armed after firing")
	}
	w.set(time.Now(), time.Now().Add(time.Hour))
	w.stop()
	if w.C() != nil {
		t.Fatal("armed after stop")
	}
}
