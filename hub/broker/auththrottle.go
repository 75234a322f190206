package broker

import (
	"container/list"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// AuthThrottle slows down clients that fail the embedded broker's
// password check. A bcrypt comparison costs tens of milliseconds of CPU,
// so a client that sends wrong passwords as fast as it can would take the
// hub's cores and make every legitimate connect wait. After a few
// failures, a client id (from one source) and then the source as a whole
// are refused for a backoff that doubles with each further failure, up to
// MaxBackoff, without any comparison; and the comparisons that do run are
// bounded in number at once, with a bounded queue.
//
// A client id is throttled per source address, so an attacker elsewhere
// cannot lock a device out by sending wrong passwords under its client
// id; the source bound, higher, stops one source from rotating client
// ids. Devices behind one NAT share a source: raise SourceFailures for
// them. Zero fields take the defaults below.
type AuthThrottle struct {
	// ClientFailures is how many failed checks a client id may make from
	// one source before its CONNECTs are refused for a backoff. Default 3.
	ClientFailures int
	// SourceFailures is the same for a source address (an IPv4 address or
	// an IPv6 /64), whatever the client ids. Default 20.
	SourceFailures int
	// Backoff is the first refusal period; every further failure doubles
	// it, up to MaxBackoff. Defaults 1s and 1m.
	Backoff, MaxBackoff time.Duration
	// Forget is how long after its last failure a client id or source
	// starts afresh. Default 10m.
	Forget time.Duration
	// Tracked bounds the client ids and, separately, the sources
	// remembered; the one whose last failure is oldest goes first. Each
	// costs about 150 bytes. Default 8192.
	Tracked int
	// Concurrent bounds the bcrypt comparisons running at once, so that a
	// flood from many sources leaves CPU to the hub. Default half the
	// CPUs (GOMAXPROCS), at least 1.
	Concurrent int
	// Queue bounds the CONNECTs waiting for a comparison; one beyond it is
	// refused at once (auth_busy). Default 16.
	Queue int
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// EnsureDefaults fills zero fields.
func (o *AuthThrottle) EnsureDefaults() {
	defaultTo(&o.ClientFailures, 3)
	defaultTo(&o.SourceFailures, 20)
	defaultTo(&o.Backoff, time.Second)
	defaultTo(&o.MaxBackoff, time.Minute)
	defaultTo(&o.Forget, 10*time.Minute)
	defaultTo(&o.Tracked, 8192)
	defaultTo(&o.Concurrent, max(1, runtime.GOMAXPROCS(0)/2))
	defaultTo(&o.Queue, 16)
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Validate names the first bad field (after EnsureDefaults).
func (o *AuthThrottle) Validate() error {
	bad := func(field string, v any, want string) error {
		return fmt.Errorf("%s: %v: want %s", field, v, want)
	}
	switch {
	case o.ClientFailures < 1 || o.ClientFailures > 1_000_000:
		return bad("ClientFailures", o.ClientFailures, "1..1000000")
	case o.SourceFailures < 1 || o.SourceFailures > 1_000_000:
		return bad("SourceFailures", o.SourceFailures, "1..1000000")
	case o.Backoff <= 0:
		return bad("Backoff", o.Backoff, "a positive duration")
	case o.MaxBackoff < o.Backoff || o.MaxBackoff > 24*time.Hour:
		return bad("MaxBackoff", o.MaxBackoff, "at least Backoff and at most 24h")
	case o.Forget < o.MaxBackoff:
		return bad("Forget", o.Forget, "at least MaxBackoff")
	case o.Tracked < 1 || o.Tracked > 1<<22:
		return bad("Tracked", o.Tracked, "1..4194304")
	case o.Concurrent < 1 || o.Concurrent > 1024:
		return bad("Concurrent", o.Concurrent, "1..1024")
	case o.Queue < 0 || o.Queue > 1<<16:
		return bad("Queue", o.Queue, "0..65536")
	}
	return nil
}

// errAuthBusy: the queue of password checks is full.
var errAuthBusy = errors.New("password checks busy")

// authThrottle applies AuthThrottle.
type authThrottle struct {
	o       AuthThrottle
	mu      sync.Mutex
	clients *failTable // keyed by clientKey
	sources *failTable // keyed by sourceKey
	slots   chan struct{}
	queued  atomic.Int64 // holding or waiting for a slot
}

func newAuthThrottle(o AuthThrottle) *authThrottle {
	o.EnsureDefaults()
	return &authThrottle{o: o, clients: newFailTable(o.Tracked), sources: newFailTable(o.Tracked),
		slots: make(chan struct{}, o.Concurrent)}
}

// throttleKeys are the table keys of one CONNECT.
type throttleKeys struct{ client, source string }

// keysOf makes the keys of a CONNECT from remote (host:port) with client
// id clientID. The client id is hashed, so a key's size does not depend on
// what the client sent.
func keysOf(remote, clientID string) throttleKeys {
	src := remote
	if ap, err := netip.ParseAddrPort(remote); err == nil {
		a := ap.Addr().Unmap()
		if a.Is6() {
			a = netip.PrefixFrom(a, 64).Masked().Addr() // one host holds a /64
		}
		src = a.String()
	} else if len(src) > 64 {
		src = src[:64]
	}
	h := sha256.Sum256([]byte(clientID))
	return throttleKeys{client: src + "|" + string(h[:16]), source: src}
}

// blocked reports whether k's client id or source is refused now.
func (t *authThrottle) blocked(k throttleKeys) bool {
	now := t.o.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.clients.blocked(k.client, now, t.o.Forget) || t.sources.blocked(k.source, now, t.o.Forget)
}

// failed records a failed check of k.
func (t *authThrottle) failed(k throttleKeys) {
	now := t.o.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.clients.fail(k.client, now, t.o.ClientFailures, t.o)
	t.sources.fail(k.source, now, t.o.SourceFailures, t.o)
}

// succeeded forgets k's client id (not its source: a success from one
// device behind a NAT says nothing about the others).
func (t *authThrottle) succeeded(k throttleKeys) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.clients.forget(k.client)
}

// acquire takes a comparison slot, waiting in the bounded queue; it
// returns errAuthBusy when the queue is full.
func (t *authThrottle) acquire() error {
	if t.queued.Add(1) > int64(t.o.Concurrent+t.o.Queue) {
		t.queued.Add(-1)
		return errAuthBusy
	}
	t.slots <- struct{}{}
	return nil
}

// release gives a slot back.
func (t *authThrottle) release() {
	<-t.slots
	t.queued.Add(-1)
}

// tracked is the number of client ids and sources remembered.
func (t *authThrottle) tracked() (clients, sources int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.clients.ll.Len(), t.sources.ll.Len()
}

// failTable remembers failures per key, at most max keys, evicting the
// one whose last failure is oldest.
type failTable struct {
	max int
	ll  *list.List // of *failEntry, most recent failure first
	m   map[string]*list.Element
}

type failEntry struct {
	key   string
	fails int
	last  time.Time // last failure
	until time.Time // refused before this
}

func newFailTable(max int) *failTable {
	return &failTable{max: max, ll: list.New(), m: map[string]*list.Element{}}
}

// blocked reports whether key is refused at now, forgetting it when its
// last failure is older than forget.
func (f *failTable) blocked(key string, now time.Time, forget time.Duration) bool {
	el, ok := f.m[key]
	if !ok {
		return false
	}
	e := el.Value.(*failEntry)
	if now.Sub(e.last) > forget {
		f.remove(el)
		return false
	}
	return now.Before(e.until)
}

// fail counts a failure of key at now: from the free'th on, the key is
// refused for o.Backoff, doubled per further failure up to o.MaxBackoff.
func (f *failTable) fail(key string, now time.Time, free int, o AuthThrottle) {
	el, ok := f.m[key]
	if ok && now.Sub(el.Value.(*failEntry).last) > o.Forget {
		f.remove(el)
		ok = false
	}
	if !ok {
		for f.ll.Len() >= f.max {
			f.remove(f.ll.Back())
		}
		el = f.ll.PushFront(&failEntry{key: key})
		f.m[key] = el
	}
	f.ll.MoveToFront(el)
	e := el.Value.(*failEntry)
	e.fails++
	e.last = now
	if over := e.fails - free; over >= 0 {
		d := o.Backoff
		for i := 0; i < over && d < o.MaxBackoff; i++ {
			d *= 2
		}
		e.until = now.Add(min(d, o.MaxBackoff))
	}
}

// forget drops key.
func (f *failTable) forget(key string) {
	if el, ok := f.m[key]; ok {
		f.remove(el)
	}
}

func (f *failTable) remove(el *list.Element) {
	delete(f.m, el.Value.(*failEntry).key)
	f.ll.Remove(el)
}

// defaultTo sets *p to d when *p is the zero value.
func defaultTo[T comparable](p *T, d T) {
	var zero T
	if *p == zero {
		*p = d
	}
}
