package simulator

import (
	"encoding/binary"
	"errors"
	"net"
	"os"
	"sync"
	"time"
)

// ntpEpochOffset is the seconds from 1900 to 1970.
const ntpEpochOffset = 2208988800

func ntpStamp(t time.Time) uint64 {
	sec := uint64(t.Unix() + ntpEpochOffset)
	frac := (uint64(t.Nanosecond()) << 32) / 1e9
	return sec<<32 | frac
}

// ntpConn is an in-process NTP server behind a net.Conn, for
// clocksync.Options.Dialer: a Write of a client request queues the answer
// of a stratum-2 server that knows the true time; Read returns it. No
// socket is used, so thousands of devices can poll without UDP traffic.
type ntpConn struct {
	now func() time.Time

	mu       sync.Mutex
	resp     []byte
	ready    chan struct{}
	deadline time.Time
	closed   bool
}

// ntpDialer returns a clocksync Dialer whose server tells now(), and which
// fails while up() is false.
func ntpDialer(now func() time.Time, up func() bool) func(string, string) (net.Conn, error) {
	return func(_, _ string) (net.Conn, error) {
		if !up() {
			return nil, errNoLink
		}
		return &ntpConn{now: now, ready: make(chan struct{})}, nil
	}
}

func (c *ntpConn) Write(b []byte) (int, error) {
	if len(b) < 48 || b[0]&7 != 3 {
		return 0, errors.New("simulator: not an NTP client request")
	}
	t2 := c.now()
	var out [48]byte
	out[0] = 0<<6 | 4<<3 | 4 // leap 0, version 4, mode server
	out[1] = 2               // stratum
	out[2] = 6
	out[3] = 0xEC                                   // precision 2^-20 s
	binary.BigEndian.PutUint32(out[4:], 1<<16/1000) // root delay 1 ms
	binary.BigEndian.PutUint32(out[8:], 1<<16/1000) // root dispersion 1 ms
	copy(out[12:16], []byte{127, 0, 0, 2})
	binary.BigEndian.PutUint64(out[16:], ntpStamp(t2.Add(-10*time.Second)))
	copy(out[24:32], b[40:48])
	binary.BigEndian.PutUint64(out[32:], ntpStamp(t2))
	binary.BigEndian.PutUint64(out[40:], ntpStamp(c.now()))
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, net.ErrClosed
	}
	if c.resp == nil {
		c.resp = out[:]
		close(c.ready)
	}
	return len(b), nil
}

func (c *ntpConn) Read(b []byte) (int, error) {
	c.mu.Lock()
	dl := c.deadline
	c.mu.Unlock()
	var timeout <-chan time.Time
	select {
	case <-c.ready: // answered at Write, as a rule: no timer needed
		dl = time.Time{}
	default:
	}
	if !dl.IsZero() {
		t := time.NewTimer(time.Until(dl))
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-c.ready:
	case <-timeout:
		return 0, os.ErrDeadlineExceeded
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return copy(b, c.resp), nil
}

func (c *ntpConn) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	return nil
}

func (c *ntpConn) LocalAddr() net.Addr  { return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40123} }
func (c *ntpConn) RemoteAddr() net.Addr { return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2), Port: 123} }

func (c *ntpConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	return nil
}
func (c *ntpConn) SetReadDeadline(t time.Time) error { return c.SetDeadline(t) }
func (c *ntpConn) SetWriteDeadline(time.Time) error  { return nil }
