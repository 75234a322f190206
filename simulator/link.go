package simulator

import (
	"context"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// linkModel is a device's network between its uplink and the broker.
type linkModel struct {
	latency, jitter time.Duration
	silent          bool
	linkUp          func() bool // the device's link is up now
	hubUp           func() bool // the hub accepts connections now; nil: always
}

// sockets are the broker connections one uplink opens through its
// device's link model (its dial is the uplink's Options.Dial). The
// simulator cuts them as a dead hub or a crashed process would: closed
// under the uplink, with no MQTT DISCONNECT, so paho reports the
// connection lost and the broker sees the client vanish and publishes its
// last will.
type sockets struct {
	link linkModel
	seed uint64
	n    atomic.Uint64
	life <-chan struct{} // closed when the uplink is stopped; nil: never
	d    net.Dialer

	mu     sync.Mutex
	open   map[*cutConn]struct{}
	killed bool
}

func newSockets(link linkModel, seed uint64, life <-chan struct{}) *sockets {
	return &sockets{link: link, seed: seed, life: life, open: map[*cutConn]struct{}{}}
}

// dial opens a connection to the broker through the link model. While the
// link is down it waits a second (the SYN goes nowhere) and fails; while
// the hub is down it is refused at once; once the agent has crashed it
// never completes (the process is gone), failing only when the uplink is
// stopped, so the dead agent's uplink does not count a failed attempt.
func (s *sockets) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if s.dead() {
		select {
		case <-s.life:
		case <-ctx.Done():
		}
		return nil, errAgentGone
	}
	if !s.link.linkUp() {
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
		}
		return nil, errLinkDown
	}
	if !s.hubUp() {
		return nil, errHubDown
	}
	c, err := s.d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	if l := s.link; l.latency > 0 || l.jitter > 0 || l.silent {
		c = newLinkConn(c, l.latency, l.jitter, l.silent, l.linkUp, s.seed+s.n.Add(1))
	}
	cc := &cutConn{Conn: c, s: s}
	// Checked again under mu: a cut that began while this dial ran has
	// closed the connections it found, and this one must not outlive it.
	s.mu.Lock()
	killed, hubUp := s.killed, s.hubUp()
	if !killed && hubUp {
		s.open[cc] = struct{}{}
	}
	s.mu.Unlock()
	switch {
	case killed:
		c.Close()
		return nil, errAgentGone
	case !hubUp:
		c.Close()
		return nil, errHubDown
	}
	return cc, nil
}

func (s *sockets) hubUp() bool { return s.link.hubUp == nil || s.link.hubUp() }

func (s *sockets) dead() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.killed
}

// cut closes every open connection at once. A hub outage cuts after
// hubUp turns false, so no dial can slip a connection in behind it.
func (s *sockets) cut() {
	s.mu.Lock()
	open := s.open
	s.open = map[*cutConn]struct{}{}
	s.mu.Unlock()
	for c := range open {
		c.cut.Store(true)
		c.Conn.Close()
	}
}

// kill cuts every connection and makes every later dial hang until the
// uplink is stopped: the agent's process has crashed.
func (s *sockets) kill() {
	s.mu.Lock()
	s.killed = true
	s.mu.Unlock()
	s.cut()
}

// cutConn is a connection sockets can cut; closing it forgets it.
type cutConn struct {
	net.Conn
	s   *sockets
	cut atomic.Bool
}

// Read reads from the connection; once cut, it fails with errCut.
func (c *cutConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if err != nil && c.cut.Load() {
		err = errCut
	}
	return n, err
}

// Write writes to the connection; once cut, it fails with errCut.
func (c *cutConn) Write(b []byte) (int, error) {
	if c.cut.Load() {
		return 0, errCut
	}
	n, err := c.Conn.Write(b)
	if err != nil && c.cut.Load() {
		err = errCut
	}
	return n, err
}

// Close closes the connection and forgets it.
func (c *cutConn) Close() error {
	c.s.mu.Lock()
	delete(c.s.open, c)
	c.s.mu.Unlock()
	return c.Conn.Close()
}

// linkConn is a net.Conn whose bytes take latency plus up to jitter to
// arrive in each direction, and which goes silent, for good, the first
// time it carries bytes while the link is down (the stream would be
// corrupt after a gap anyway): writes then vanish and reads wait for
// Close. Writes return once queued, as a kernel socket buffer would; a
// full queue (64 chunks) blocks the writer.
type linkConn struct {
	net.Conn
	latency, jitter time.Duration
	silent          bool
	up              func() bool

	dead    atomic.Bool
	closed  chan struct{}
	once    sync.Once
	out     chan chunk // device -> broker
	in      chan chunk // broker -> device, read by Read
	pending []byte     // the rest of the chunk Read is handing out
	readErr error      // the broker side's read error, after pending

	mu      sync.Mutex
	rng     *rand.Rand
	lastOut time.Time
	lastIn  time.Time
}

type chunk struct {
	at   time.Time
	data []byte
	err  error
}

func newLinkConn(c net.Conn, latency, jitter time.Duration, silent bool, up func() bool, seed uint64) *linkConn {
	l := &linkConn{Conn: c, latency: latency, jitter: jitter, silent: silent, up: up,
		closed: make(chan struct{}), out: make(chan chunk, 64), in: make(chan chunk, 64),
		rng: rand.New(rand.NewPCG(seed, 77))}
	go l.sendLoop()
	go l.recvLoop()
	return l
}

// due is when a chunk sent now arrives: after the delay, and not before
// the previous chunk in the same direction.
func (l *linkConn) due(last *time.Time) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	d := l.latency
	if l.jitter > 0 {
		d += time.Duration(l.rng.Int64N(int64(l.jitter) + 1))
	}
	at := time.Now().Add(d)
	if at.Before(*last) {
		at = *last
	}
	*last = at
	return at
}

// carries reports whether the link carries bytes now; the first time it
// does not (silent outage), the connection is dead for good.
func (l *linkConn) carries() bool {
	if l.dead.Load() {
		return false
	}
	if l.silent && !l.up() {
		l.dead.Store(true)
		return false
	}
	return true
}

// Write queues b for delivery to the broker after the link's delay.
func (l *linkConn) Write(b []byte) (int, error) {
	select {
	case <-l.closed:
		return 0, net.ErrClosed
	default:
	}
	if !l.carries() {
		return len(b), nil // gone into the void
	}
	c := chunk{at: l.due(&l.lastOut), data: append([]byte(nil), b...)}
	select {
	case l.out <- c:
		return len(b), nil
	case <-l.closed:
		return 0, net.ErrClosed
	}
}

// sendLoop delivers queued writes to the broker when they are due.
func (l *linkConn) sendLoop() {
	for {
		select {
		case c := <-l.out:
			if !sleepUntil(c.at, l.closed) {
				return
			}
			if !l.carries() {
				continue
			}
			if _, err := l.Conn.Write(c.data); err != nil {
				l.Close()
				return
			}
		case <-l.closed:
			return
		}
	}
}

// recvLoop reads from the broker and queues what arrives for Read.
func (l *linkConn) recvLoop() {
	for {
		buf := make([]byte, 32<<10)
		n, err := l.Conn.Read(buf)
		c := chunk{at: l.due(&l.lastIn), data: buf[:n], err: err}
		select {
		case l.in <- c:
		case <-l.closed:
			return
		}
		if err != nil {
			return
		}
	}
}

// Read hands out the broker's bytes once they are due; on a dead link it
// waits for Close (or the read deadline paho does not set).
func (l *linkConn) Read(b []byte) (int, error) {
	if len(l.pending) == 0 && l.readErr != nil {
		return 0, l.readErr
	}
	for len(l.pending) == 0 {
		select {
		case c := <-l.in:
			if !sleepUntil(c.at, l.closed) {
				return 0, net.ErrClosed
			}
			if !l.carries() {
				continue
			}
			l.pending, l.readErr = c.data, c.err
			if len(l.pending) == 0 && l.readErr != nil {
				return 0, l.readErr
			}
		case <-l.closed:
			return 0, net.ErrClosed
		}
	}
	n := copy(b, l.pending)
	l.pending = l.pending[n:]
	return n, nil
}

// Close closes the real connection and stops both directions.
func (l *linkConn) Close() error {
	var err error
	l.once.Do(func() {
		close(l.closed)
		err = l.Conn.Close()
	})
	return err
}

// sleepUntil waits until t or until done closes; it reports whether t came.
func sleepUntil(t time.Time, done <-chan struct{}) bool {
	d := time.Until(t)
	if d <= 0 {
		return true
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-done:
		return false
	}
}
