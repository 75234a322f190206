package simulator

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// errLinkDown is what dialing a device's broker connection gives while its
// simulated link is down.
var errLinkDown = errors.New("simulator: link down")

// linkDialer returns an uplink Dial function that puts a device's link
// model between its uplink and the broker: a one-way delay of latency plus
// up to jitter on every chunk in each direction (order kept, as TCP keeps
// it), and, for silent outages, a link that stops carrying bytes without
// closing, so the agent finds out only through its keep-alive. up says
// whether the link is up now. While it is down a dial waits a second (the
// SYN goes nowhere) and fails.
func linkDialer(latency, jitter time.Duration, silent bool, up func() bool, seed uint64) func(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	var n atomic.Uint64
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if !up() {
			select {
			case <-time.After(time.Second):
			case <-ctx.Done():
			}
			return nil, errLinkDown
		}
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		if latency == 0 && jitter == 0 && !silent {
			return c, nil
		}
		return newLinkConn(c, latency, jitter, silent, up, seed+n.Add(1)), nil
	}
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
