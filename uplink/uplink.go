package uplink

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"edgeflow/buffer"
	"edgeflow/internal/lograte"
	"edgeflow/wire"
)

// Stream is the durable log an Uplink drains; *buffer.Stream implements it.
type Stream interface {
	ID() wire.StreamID
	// Scan hands fn the records from seq on, valid only during the call,
	// until fn declines one or a bound is reached (see buffer.Stream.Scan).
	Scan(seq uint64, maxEvents, maxBytes int, fn func(seq uint64, rec []byte) bool) (int, error)
	Ack(upTo uint64) error
	Gaps() []buffer.Gap
	Stats() buffer.Stats
}

// Uplink uploads one buffer stream of one device over one MQTT connection.
// Create it with New, start it with Run; Notify and Status are safe to call
// from any goroutine.
type Uplink struct {
	opts     Options
	st       Stream
	sid      wire.StreamID
	codec    wire.Codec
	readable <-chan struct{} // nil unless st is a readableStream
	m        *Metrics
	log      *slog.Logger
	tlsConf  *tls.Config
	ackTopic string

	acks    chan []byte   // ack payloads from paho's handler goroutines
	notify  chan struct{} // Notify's poke, capacity 1
	stop    chan struct{} // closed when the send loop has ended; releases handlers
	started atomic.Bool

	// Owned by the send loop (Run's goroutine).
	rnd         *rand.Rand
	win         window
	next        uint64 // next sequence number to read from the buffer
	draining    bool   // the last batch left more events behind it: skip linger
	lingerSince time.Time
	// lingered: the waiting events have lingered and were not yet
	// readable (the buffer's interval sync), so they go once they are.
	lingered  bool
	cuts      []columnCut // readColumnBatches' blocks, reused
	bw        *bucket
	bwUntil   time.Time
	statusDue time.Time
	conn      *conn
	connID    uint64 // this connection's id in its statuses and will (send loop)
	fails     int    // connection attempts since the last stable connection
	everUp    bool
	rejLog    lograte.Limiter
	warnLog   lograte.Limiter
	// answeredTo is the prefix of the stream the hub has answered;
	// bufAcked what the buffer was last told to free; unreported the
	// batches the hub rejected whole that no answered batch has reported
	// yet, ascending (gaps.go).
	answeredTo, bufAcked uint64
	unreported           []buffer.Gap
	// pubs counts batch publishes, resends included: the order
	// fastResend compares.
	pubs uint64

	mu   sync.Mutex
	snap Status
}

// conn is one MQTT connection: a fresh paho client per connection (see
// the package documentation for why).
type conn struct {
	cli  mqtt.Client
	lost chan error // closed-over by paho's connection-lost handler, capacity 1
	up   time.Time
}

// New checks the options and returns an Uplink for stream st.
func New(st Stream, o Options) (*Uplink, error) {
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	u := &Uplink{
		opts: o, st: st, sid: st.ID(), codec: o.codec(), log: o.Logger.With("device", o.DeviceID),
		ackTopic: wire.AckTopic(o.DeviceID),
		acks:     make(chan []byte, 4*o.Window+16),
		notify:   make(chan struct{}, 1),
		stop:     make(chan struct{}),
		rnd:      rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())),
		rejLog:   lograte.Limiter{Every: o.LogEvery},
		warnLog:  lograte.Limiter{Every: o.LogEvery},
	}
	if r, ok := st.(readableStream); ok {
		u.readable = r.Readable()
	}
	if o.TLS.Enabled() {
		c, err := o.TLS.Config()
		if err != nil {
			return nil, fmt.Errorf("uplink: %w", err)
		}
		u.tlsConf = c
	}
	u.m = o.Metrics
	if u.m == nil {
		m, err := NewMetrics(o.Registerer)
		if err != nil {
			return nil, err
		}
		u.m = m
	}
	u.snap = Status{State: StateIdle, Since: o.Now()}
	return u, nil
}

// Metrics returns the series the Uplink updates.
func (u *Uplink) Metrics() *Metrics { return u.m }

// Notify tells the Uplink that events were appended, so it need not wait
// for its next poll (and, with a stream that says when records become
// readable, so their linger starts at the append). It never blocks.
func (u *Uplink) Notify() {
	select {
	case u.notify <- struct{}{}:
	default:
	}
}

// Run uploads until ctx ends, then publishes the offline status,
// disconnects and returns nil. It returns an error only if it cannot go on
// (the buffer was closed under it).
//
// Shutdown order: ctx ends; the send loop publishes status online=false
// (waiting at most ConnectTimeout) and disconnects, which stops paho's
// goroutines; stop is closed, releasing ack handlers still waiting to hand
// over a payload; the acker writes the last cumulative ack to the buffer and
// exits; Run returns.
func (u *Uplink) Run(ctx context.Context) error {
	if !u.started.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	acks := make(chan uint64, 1)
	ackerDone := make(chan struct{})
	go u.acker(acks, ackerDone)
	err := u.loop(ctx, acks)
	close(u.stop)
	close(acks)
	<-ackerDone
	u.m.InFlight.Sub(float64(u.win.len()))
	u.setState(StateStopped, err)
	return err
}

// acker owns the buffer's Ack calls, so an fsync in the buffer never delays
// the send loop. It gets the latest cumulative position; positions that
// arrive while an Ack is running coalesce.
func (u *Uplink) acker(in <-chan uint64, done chan<- struct{}) {
	defer close(done)
	for upTo := range in {
		if err := u.st.Ack(upTo); err != nil {
			u.log.Error("uplink: ack buffer", "up_to", upTo, "err", err)
		}
	}
}

// offerAck hands upTo to the acker, replacing a position it has not taken
// yet (the send loop is the channel's only writer; positions only grow).
func offerAck(ch chan uint64, upTo uint64) {
	for {
		select {
		case ch <- upTo:
			return
		default:
		}
		select {
		case old := <-ch:
			upTo = max(upTo, old)
		default:
		}
	}
}

// loop is the send loop: it owns the connection, the window and the
// position in the buffer.
func (u *Uplink) loop(ctx context.Context, acks chan uint64) error {
	u.next = u.st.Stats().Acked + 1
	u.answeredTo, u.bufAcked = u.next-1, u.next-1
	if u.opts.BandwidthBytesPerSec > 0 {
		u.bw = newBucket(u.opts.BandwidthBytesPerSec, u.opts.MaxBatchBytes+4096, time.Now())
	}
	var wake wakeTimer
	defer wake.stop()
	for {
		if u.conn == nil {
			if err := u.connectLoop(ctx, acks); err != nil {
				return nil // ctx ended while disconnected
			}
		}
		now := time.Now()
		if err := u.pump(now); err != nil {
			u.disconnect()
			return err
		}
		u.publishSnap()
		wake.set(now, u.nextWake(now))
		select {
		case <-ctx.Done():
			u.shutdown()
			return nil
		case err := <-u.conn.lost:
			u.connectionLost(err)
		case p := <-u.acks:
			u.onAck(p, acks)
		drain:
			for range cap(u.acks) {
				select {
				case p := <-u.acks:
					u.onAck(p, acks)
				default:
					break drain
				}
			}
		case <-u.notify:
		case <-u.readable:
		case <-wake.C():
			wake.fired()
		}
	}
}

// readableStream is a Stream that says when records become readable
// (buffer.Stream does): the send loop then wakes for them instead of
// finding them at its next poll, which matters in the buffer's interval
// mode, where an append becomes readable only at the next sync.
type readableStream interface {
	Readable() <-chan struct{}
}

// readablePollFloor is the shortest poll of a stream that says when
// records become readable: its signal wakes the send loop for new records,
// so the poll is only a safety net. At the 100 ms default a process with
// thousands of uplinks (the fleet simulator) spent much of its CPU on
// passes that found nothing.
const readablePollFloor = 5 * time.Second

// pollInterval is how long the send loop waits for nothing in particular.
func (u *Uplink) pollInterval() time.Duration {
	if u.readable != nil {
		return max(u.opts.PollInterval, readablePollFloor)
	}
	return u.opts.PollInterval
}

// nextWake is when the send loop must look again without being poked.
func (u *Uplink) nextWake(now time.Time) time.Time {
	wake := now.Add(u.pollInterval())
	earlier := func(t time.Time) {
		if !t.IsZero() && t.Before(wake) {
			wake = t
		}
	}
	for _, f := range u.win.q {
		if !f.done && !f.queued {
			earlier(f.deadline)
		}
	}
	if !u.lingerSince.IsZero() && (u.readable == nil || u.st.Stats().Readable > u.next) {
		// A stream that signals readability wakes the loop when the
		// lingering records can be read; until then a linger deadline
		// would only add a pass that finds nothing.
		earlier(u.lingerSince.Add(u.opts.linger()))
	}
	if u.bwUntil.After(now) {
		earlier(u.bwUntil)
	}
	earlier(u.statusDue)
	if wake.Before(now) {
		return now
	}
	return wake
}

// onAck applies one payload from the ack topic and hands an advanced
// cumulative position to the acker.
func (u *Uplink) onAck(payload []byte, acks chan uint64) {
	if upTo, ok := u.handleAck(payload, time.Now()); ok {
		offerAck(acks, upTo)
	}
}

// warn logs a rate-limited warning.
func (u *Uplink) warn(l *lograte.Limiter, msg string, args ...any) {
	if ok, n := l.Allow(time.Now()); ok {
		if n > 0 {
			args = append(args, "suppressed", n)
		}
		u.log.Warn(msg, args...)
	}
}

// errClosed reports whether err means the buffer is gone for good.
func errClosed(err error) bool { return errors.Is(err, buffer.ErrClosed) }

func wrapStream(err error) error { return fmt.Errorf("uplink: buffer stream: %w", err) }
