package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"edgeflow/buffer"
	"edgeflow/clocksync"
	"edgeflow/uplink"
	"edgeflow/wire/wirepb"
)

// Agent is one device's edge agent. New opens the buffer and binds the
// listeners; Run serves until its context ends and then shuts down in the
// order the package documentation gives.
type Agent struct {
	opts  Options
	log   *slog.Logger
	m     metrics
	store *buffer.Store
	st    *buffer.Stream
	sid   string // the stream id, read once: Stream.ID is not safe beside commits
	clock timekeeper
	cs    *clocksync.Clock // nil without a time source
	tconn *timeConn        // nil unless TimeHub
	up    *uplink.Uplink

	httpLn  net.Listener
	udpConn net.PacketConn
	srv     *http.Server

	ran       atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

// New checks opts, binds the listeners, opens the buffer and the device's
// stream, and sets up the clock and the uplink. Nothing is sent or served
// until Run.
func New(o Options) (a *Agent, err error) {
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	a = &Agent{opts: o, log: o.Logger.With("component", "agent")}
	// The returns below set a to nil, so the cleanup holds its own pointer.
	opened := a
	defer func() {
		if err != nil {
			opened.Close()
		}
	}()
	if err := a.m.register(o.Registerer); err != nil {
		return nil, fmt.Errorf("agent: register metrics: %w", err)
	}
	// Bind first: an address in use fails New before the buffer is opened
	// (and replayed, on a large one). Nothing is served until Run.
	if err := a.listen(); err != nil {
		return nil, err
	}
	if a.store, err = buffer.Open(o.DataDir, o.Buffer); err != nil {
		return nil, err
	}
	if a.st, err = a.store.Stream(o.DeviceID, o.Stream); err != nil {
		return nil, err
	}
	a.sid = a.st.ID().String()
	if err := a.setupClock(); err != nil {
		return nil, err
	}
	uo := o.Uplink
	uo.Retime = retimer{clock: a.clock, m: &a.m}.retime
	uo.Clock = func() *wirepb.ClockEstimate { return a.clock.Estimate().Proto() }
	if a.up, err = uplink.New(a.st, uo); err != nil {
		return nil, err
	}
	a.warnOpen()
	return a, nil
}

// setupClock picks clocksync with NTP and/or the hub, or a fixed clock.
func (a *Agent) setupClock() error {
	o := &a.opts
	var hub clocksync.HubExchanger
	if o.TimeHub {
		tc, err := newTimeConn(o)
		if err != nil {
			return err
		}
		a.tconn, hub = tc, tc.hub
	}
	co, ok := o.clockOptions(hub)
	if !ok {
		a.clock = newFixedClock(o.TrustDeviceClock, o.Now)
		a.log.Warn("no time source (ntp servers empty, time hub off): events carry the raw device clock",
			"method", a.clock.Estimate().Method.String())
		return nil
	}
	c, err := clocksync.New(co)
	if err != nil {
		return err
	}
	a.cs, a.clock = c, c
	if a.tconn != nil {
		a.tconn.clock.Store(c) // a new time connection polls at once
	}
	return nil
}

// waitFirstSync holds the first upload until the clock is trusted, at most
// FirstSyncWait: events accepted meanwhile are then sent stamped or
// repaired by the agent's own estimate, not left to the hub's.
func (a *Agent) waitFirstSync(ctx context.Context) {
	if a.cs == nil || a.opts.FirstSyncWait <= 0 {
		return
	}
	t := time.NewTimer(a.opts.FirstSyncWait)
	defer t.Stop()
	select {
	case <-a.cs.Synced():
	case <-ctx.Done():
	case <-t.C:
		a.log.Info("no trusted clock within first-sync-wait; uploading, events stamped meanwhile are repaired once it is",
			"first_sync_wait", a.opts.FirstSyncWait)
	}
}

// listen binds the HTTP and UDP listeners, so an address in use fails New.
func (a *Agent) listen() error {
	var err error
	if a.opts.HTTPAddr != Off {
		if a.httpLn, err = net.Listen("tcp", a.opts.HTTPAddr); err != nil {
			return fmt.Errorf("agent: http listen: %w", err)
		}
		a.srv = &http.Server{Handler: guardHTTP(a.Handler(), a.opts.HTTPToken), ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout: time.Minute, WriteTimeout: time.Minute, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10}
		if a.opts.HTTPTLSCertFile != "" {
			cert, err := tls.LoadX509KeyPair(a.opts.HTTPTLSCertFile, a.opts.HTTPTLSKeyFile)
			if err != nil {
				a.httpLn.Close()
				return fmt.Errorf("agent: http tls: %w", err)
			}
			a.srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
			a.httpLn = tls.NewListener(a.httpLn, a.srv.TLSConfig)
		}
	}
	if a.opts.UDPAddr != "" && a.opts.UDPAddr != Off {
		if a.udpConn, err = net.ListenPacket("udp", a.opts.UDPAddr); err != nil {
			return fmt.Errorf("agent: udp listen: %w", err)
		}
	}
	return nil
}

// HTTPAddr is the bound HTTP address ("" when off).
func (a *Agent) HTTPAddr() string {
	if a.httpLn == nil {
		return ""
	}
	return a.httpLn.Addr().String()
}

// UDPAddr is the bound UDP address ("" when off).
func (a *Agent) UDPAddr() string {
	if a.udpConn == nil {
		return ""
	}
	return a.udpConn.LocalAddr().String()
}

// Stream is the device's buffer stream (for tests and status).
func (a *Agent) Stream() *buffer.Stream { return a.st }

// Run serves ingest, keeps the clock and uploads until ctx ends, then shuts
// down (see the package documentation) and closes the agent. It returns the
// first error that stopped it early, or what closing reported.
func (a *Agent) Run(ctx context.Context) error {
	if !a.ran.CompareAndSwap(false, true) {
		return ErrAlreadyRun
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var ingest sync.WaitGroup
	if a.srv != nil {
		ingest.Go(func() {
			if err := a.srv.Serve(a.httpLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				cancel(fmt.Errorf("agent: http: %w", err))
			}
		})
	}
	if a.udpConn != nil {
		ingest.Go(func() { a.serveUDP(ctx) })
	}
	clockCtx, stopClock := context.WithCancel(context.Background())
	var clockDone sync.WaitGroup
	if a.cs != nil {
		clockDone.Go(func() { _ = a.cs.Run(clockCtx) })
	}
	a.waitFirstSync(ctx)
	upCtx, stopUplink := context.WithCancel(context.Background())
	upDone := make(chan error, 1)
	go func() { upDone <- a.up.Run(upCtx) }()
	a.log.Info("agent started", "device", a.opts.DeviceID, "stream", a.sid,
		"http", a.HTTPAddr(), "udp", a.UDPAddr(), "brokers", a.opts.Uplink.Brokers, "version", a.opts.Version)

	var upErr error
	select {
	case <-ctx.Done():
	case upErr = <-upDone:
		cancel(upErr)
	}
	// Shutdown, in order: ingest, drain, uplink, clock, buffer.
	a.stopIngest()
	ingest.Wait()
	if upErr == nil {
		a.drain()
		stopUplink()
		upErr = <-upDone
	}
	stopUplink()
	stopClock()
	clockDone.Wait()
	err := a.Close()
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	if upErr != nil {
		return upErr
	}
	a.log.Info("agent stopped", "depth", a.st.Stats().Depth)
	return err
}

// stopIngest stops the HTTP server (waiting for requests in progress, so
// their appends complete) and closes the UDP socket.
func (a *Agent) stopIngest() {
	if a.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := a.srv.Shutdown(ctx); err != nil {
			a.log.Warn("agent: http shutdown", "err", err)
			a.srv.Close()
		}
		cancel()
	}
	if a.udpConn != nil {
		a.udpConn.Close()
	}
}

// drain gives a connected uplink up to DrainTimeout to empty the buffer.
func (a *Agent) drain() {
	if a.opts.DrainTimeout == NoDrain || a.up.Status().State != uplink.StateConnected {
		return
	}
	deadline := time.Now().Add(a.opts.DrainTimeout)
	for a.st.Stats().Depth > 0 && time.Now().Before(deadline) {
		a.up.Notify()
		if a.up.Status().State != uplink.StateConnected {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if d := a.st.Stats().Depth; d > 0 {
		a.log.Info("agent: shutting down with events buffered; they are sent after the restart", "depth", d)
	}
}

// Close releases what New opened: the time connection, the listeners and
// the buffer (which syncs). Run calls it; call it yourself only for an
// Agent that never ran.
func (a *Agent) Close() error {
	a.closeOnce.Do(func() {
		if a.tconn != nil {
			a.tconn.close()
		}
		if a.httpLn != nil {
			a.httpLn.Close()
		}
		if a.udpConn != nil {
			a.udpConn.Close()
		}
		if a.store != nil {
			a.closeErr = a.store.Close()
		}
	})
	return a.closeErr
}
