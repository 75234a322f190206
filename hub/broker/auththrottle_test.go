package broker

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// fakeClock is a clock the test moves.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) add(d time.Duration)     { c.t = c.t.Add(d) }
func newFakeClock() *fakeClock               { return &fakeClock{t: time.Unix(1_700_000_000, 0)} }
func throttleFor(c *fakeClock) *authThrottle { return newAuthThrottle(AuthThrottle{Now: c.now}) }

func TestAuthThrottleBackoff(t *testing.T) {
	clk := newFakeClock()
	th := throttleFor(clk)
	k := keysOf("192.0.2.1:4000", "flood")
	for i := 0; i < 2; i++ {
		th.failed(k)
		if th.blocked(k) {
			t.Fatalf("blocked after %d failures, want 3 free", i+1)
		}
	}
	// The 3rd failure blocks the client id at its source for 1s; another
	// client id from the same source, and the same client id from another
	// source, are not blocked.
	th.failed(k)
	if !th.blocked(k) || th.blocked(keysOf("192.0.2.1:4001", "device")) || th.blocked(keysOf("192.0.2.2:4000", "flood")) {
		t.Fatal("the block is not confined to the client id at its source")
	}
	clk.add(time.Second)
	// Each further failure doubles the backoff: 2s, 4s...
	for i, want := range []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second} {
		th.failed(k)
		clk.add(want - time.Millisecond)
		if !th.blocked(k) {
			t.Fatalf("failure %d: free again before %v", i+4, want)
		}
		clk.add(time.Millisecond)
		if th.blocked(k) {
			t.Fatalf("failure %d: still blocked after %v", i+4, want)
		}
	}
	// The backoff stops growing at MaxBackoff (from another source: this
	// one is near its own bound).
	k = keysOf("192.0.2.9:4000", "flood")
	for range 15 {
		th.failed(k)
	}
	clk.add(time.Minute - time.Millisecond)
	if !th.blocked(k) {
		t.Fatal("free before MaxBackoff")
	}
	clk.add(time.Millisecond)
	if th.blocked(k) {
		t.Fatal("blocked beyond MaxBackoff")
	}
	th.failed(k)
	// A success forgets the client id; Forget does too.
	th.succeeded(k)
	if th.blocked(k) {
		t.Fatal("blocked after a success")
	}
	for range 3 {
		th.failed(k)
	}
	clk.add(10*time.Minute + time.Second)
	th.failed(k)
	if th.blocked(k) {
		t.Fatal("failures older than Forget still count")
	}
}

func TestAuthThrottleSource(t *testing.T) {
	clk := newFakeClock()
	th := throttleFor(clk)
	for i := range 20 {
		k := keysOf("198.51.100.7:1000", fmt.Sprint("rotate-", i))
		if th.blocked(k) {
			t.Fatalf("source blocked after %d failures, want 20 free", i)
		}
		th.failed(k)
	}
	if !th.blocked(keysOf("198.51.100.7:1001", "new-id")) {
		t.Fatal("a source with 20 failures under changing client ids is not blocked")
	}
	if th.blocked(keysOf("198.51.100.8:1000", "new-id")) {
		t.Fatal("another source is blocked")
	}
	// An IPv6 source is its /64.
	for i := range 20 {
		th.failed(keysOf(fmt.Sprintf("[2001:db8:1:2::%x]:1000", i+1), fmt.Sprint("v6-", i)))
	}
	if !th.blocked(keysOf("[2001:db8:1:2:ffff::1]:1000", "x")) || th.blocked(keysOf("[2001:db8:1:3::1]:1000", "x")) {
		t.Fatal("IPv6 sources are not grouped by /64")
	}
}

// TestAuthThrottleBounded: a flood of random client ids and sources keeps
// the tables at Tracked entries, whatever the client ids' length.
func TestAuthThrottleBounded(t *testing.T) {
	clk := newFakeClock()
	th := newAuthThrottle(AuthThrottle{Now: clk.now, Tracked: 100})
	long := strings.Repeat("x", 4096)
	for i := range 2000 {
		th.failed(keysOf(fmt.Sprintf("10.%d.%d.%d:1", i>>16&255, i>>8&255, i&255), long+fmt.Sprint(i)))
	}
	c, s := th.tracked()
	if c != 100 || s != 100 {
		t.Fatalf("tracked %d client ids and %d sources, want 100 each", c, s)
	}
	for key := range th.clients.m {
		if len(key) > 64+1+16 {
			t.Fatalf("a client key of %d bytes", len(key))
		}
	}
	// The most recent failures are the ones kept.
	last := keysOf("10.0.7.207:1", long+"1999")
	for range 2 {
		th.failed(last)
	}
	if !th.blocked(last) {
		t.Fatal("the most recent client id was evicted")
	}
}

func TestAuthThrottleQueue(t *testing.T) {
	th := newAuthThrottle(AuthThrottle{Concurrent: 1, Queue: 1})
	if err := th.acquire(); err != nil {
		t.Fatal(err)
	}
	waiting := make(chan error)
	go func() { waiting <- th.acquire() }()
	// The second waits for the slot; a third finds the queue full.
	for th.queued.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	if err := th.acquire(); err != errAuthBusy {
		t.Fatalf("third acquire: %v, want errAuthBusy", err)
	}
	th.release()
	if err := <-waiting; err != nil {
		t.Fatal(err)
	}
	th.release()
	if n := th.queued.Load(); n != 0 {
		t.Fatalf("queued %d after all released", n)
	}
}

func TestAuthThrottleValidate(t *testing.T) {
	for field, mut := range map[string]func(*AuthThrottle){
		"ClientFailures": func(o *AuthThrottle) { o.ClientFailures = -1 },
		"SourceFailures": func(o *AuthThrottle) { o.SourceFailures = -2 },
		"MaxBackoff":     func(o *AuthThrottle) { o.MaxBackoff = time.Millisecond },
		"Forget":         func(o *AuthThrottle) { o.Forget = time.Second },
		"Tracked":        func(o *AuthThrottle) { o.Tracked = -1 },
		"Concurrent":     func(o *AuthThrottle) { o.Concurrent = 5000 },
	} {
		o := AuthThrottle{}
		o.EnsureDefaults()
		mut(&o)
		if err := o.Validate(); err == nil || !strings.HasPrefix(err.Error(), field+":") {
			t.Errorf("%s: %v", field, err)
		}
	}
	o := AuthThrottle{}
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
}
