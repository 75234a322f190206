package clocksync

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// simClock is the device under test: a monotonic clock that runs in real
// time plus virtual jumps (so loopback delays are real while hours pass in
// a test), and a wall clock that is the monotonic clock plus a base that a
// test can step.
type simClock struct {
	start    time.Time
	frozen   bool // only Advance moves it: no real time, so load cannot widen a fit
	virt     atomic.Int64
	wallBase atomic.Int64 // Unix ns of the wall clock at mono 0
}

// newFrozenSimClock is a simClock that only Advance moves, for tests whose
// bounds must not depend on how loaded the machine is.
func newFrozenSimClock(wallAtStart time.Time) *simClock {
	s := newSimClock(wallAtStart)
	s.frozen = true
	return s
}

func newSimClock(wallAtStart time.Time) *simClock {
	s := &simClock{start: time.Now()}
	// Start a day into the boot, like a device that has been up a while.
	s.virt.Store(int64(24 * time.Hour))
	s.wallBase.Store(wallAtStart.UnixNano() - int64(24*time.Hour))
	return s
}

func (s *simClock) Mono() time.Duration {
	if s.frozen {
		return time.Duration(s.virt.Load())
	}
	return time.Since(s.start) + time.Duration(s.virt.Load())
}
func (s *simClock) Wall() time.Time { return time.Unix(0, s.wallBase.Load()+int64(s.Mono())) }
func (s *simClock) Advance(d time.Duration) {
	s.virt.Add(int64(d))
}
func (s *simClock) StepWall(d time.Duration) { s.wallBase.Add(int64(d)) }

// refClock is a server's clock, defined on the device's monotonic
// timeline: at the start it is offset ahead of the device wall, and it
// runs drift faster than the device's monotonic clock; step moves it. Its
// offset from the device wall at any moment is therefore known exactly.
type refClock struct {
	dev   *simClock
	boot  int64 // server's Unix ns at mono 0, before drift
	mono0 time.Duration
	drift float64 // dimensionless
	step  atomic.Int64
}

func newRef(dev *simClock, offset time.Duration, driftPPM float64) *refClock {
	return &refClock{dev: dev, boot: dev.wallBase.Load() + int64(offset), mono0: dev.Mono(), drift: driftPPM * 1e-6}
}

func (r *refClock) at(mono time.Duration) int64 {
	return r.boot + int64(mono) + int64(r.drift*float64(mono-r.mono0)) + r.step.Load()
}
func (r *refClock) Now() time.Time { return time.Unix(0, r.at(r.dev.Mono())) }

// trueOffset is the server's time minus the device wall at mono.
func (r *refClock) trueOffset(mono time.Duration) time.Duration {
	return time.Duration(r.at(mono) - (r.dev.wallBase.Load() + int64(mono)))
}

// ntpMode says how a test server answers.
type ntpMode int32

const (
	modeNormal   ntpMode = iota
	modeDrop             // reads requests, never answers
	modeRATE             // kiss of death RATE
	modeDENY             // kiss of death DENY
	modeUnsynced         // leap indicator 3 (clock not synchronised)
)

// ntpServer is a minimal NTPv4 server on 127.0.0.1 whose clock the test
// controls. It reads its clock twice (receive, transmit) around an
// optional random delay, as a real server under load would.
type ntpServer struct {
	addr     string
	conn     *net.UDPConn
	clock    func() time.Time
	mode     atomic.Int32
	jitter   time.Duration // max extra delay before answering
	requests atomic.Int64
	wg       sync.WaitGroup
}

func startNTP(t testing.TB, clock func() time.Time, jitter time.Duration) *ntpServer {
	t.Helper()
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	s := &ntpServer{addr: conn.LocalAddr().String(), conn: conn, clock: clock, jitter: jitter}
	s.wg.Add(1)
	go s.serve()
	t.Cleanup(func() {
		conn.Close()
		s.wg.Wait()
	})
	return s
}

const ntpEpochOffset = 2208988800 // seconds from 1900 to 1970

func ntpStamp(t time.Time) uint64 {
	sec := uint64(t.Unix() + ntpEpochOffset)
	frac := (uint64(t.Nanosecond()) << 32) / 1e9
	return sec<<32 | frac
}

func (s *ntpServer) serve() {
	defer s.wg.Done()
	buf := make([]byte, 512)
	for {
		n, from, err := s.conn.ReadFromUDP(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		t2 := s.clock()
		if n < 48 || buf[0]&7 != 3 {
			continue
		}
		s.requests.Add(1)
		mode := ntpMode(s.mode.Load())
		if mode == modeDrop {
			continue
		}
		if s.jitter > 0 {
			time.Sleep(rand.N(s.jitter))
		}
		var out [48]byte
		li, stratum, refID := byte(0), byte(2), []byte{127, 0, 0, 2}
		switch mode {
		case modeRATE:
			li, stratum, refID = 3, 0, []byte("RATE")
		case modeDENY:
			li, stratum, refID = 3, 0, []byte("DENY")
		case modeUnsynced:
			li = 3
		}
		out[0] = li<<6 | 4<<3 | 4
		out[1] = stratum
		out[2] = 6
		out[3] = 0xEC // precision -20: 2^-20 s
		copy(out[12:16], refID)
		binary.BigEndian.PutUint64(out[16:], ntpStamp(t2.Add(-10*time.Second)))
		copy(out[24:32], buf[40:48])
		binary.BigEndian.PutUint64(out[32:], ntpStamp(t2))
		binary.BigEndian.PutUint64(out[40:], ntpStamp(s.clock()))
		_, _ = s.conn.WriteToUDP(out[:], from)
	}
}
