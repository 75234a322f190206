package hub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"

	"edgeflow/hub/api"
	"edgeflow/hub/attrs"
	"edgeflow/hub/batchview"
	"edgeflow/hub/broker"
	"edgeflow/hub/clockest"
	"edgeflow/hub/cluster"
	"edgeflow/hub/eventtime"
	"edgeflow/hub/hublog"
	"edgeflow/hub/ratelimit"
	"edgeflow/hub/registry"
	"edgeflow/hub/timeservice"
	"edgeflow/internal/lograte"
)

// Server is a hub: a transport to the fleet's broker, the ingest pipeline,
// the log on Badger, the device registry, the consumers and the HTTP API.
// Create it with New, then Run it (or Start and Shutdown).
type Server struct {
	opts   Options
	log    *slog.Logger
	m      *metrics
	reg    *registry.Registry
	app    *applier
	agg    *aggregates     // nil without Options.Aggregate
	attrs  *attrs.Table    // the device attribute table (attrtable.go)
	rules  *alertsConsumer // nil without Options.Rules
	st     *hublog.Store
	com    *committer
	tr     broker.Transport
	views  sync.Pool
	rejLog rateLog

	limiter   *ratelimit.Limiter    // nil: no per-device event rate limit
	api       *api.API              // the HTTP endpoints (package api)
	brokerSec broker.BrokerSecurity // the embedded broker's, loaded by New

	workers     []chan inMsg
	inMu        sync.RWMutex // write-locked to close the pipeline's inputs
	inClosed    bool
	timeSvc     atomic.Pointer[TimeRequestHandler]
	applierReqs chan applierReq
	ckptMu      sync.Mutex         // one checkpoint at a time; guards lastCkpt
	lastCkpt    *hublog.Checkpoint // the last checkpoint written (or recovered)
	ckptPos     atomic.Uint64      // log position covered by the older retained checkpoint
	dm          *damageMetrics
	ready       atomic.Bool
	recovered   atomic.Bool // the state is recovered: queries may run
	started     bool
	fatal       chan error
	done        chan struct{} // closed when background loops must stop
	workersWG   sync.WaitGroup
	pipeWG      sync.WaitGroup
	loopsWG     sync.WaitGroup
	applyDone   chan struct{}
	httpSrv     *http.Server
	httpLn      net.Listener
	brokerLn    net.Listener             // the embedded broker's, bound by Start; the transport owns it once created
	cl          *clusterMode             // cluster mode (Options.NATS) only
	own         *ownership               // cluster mode: the partitions this hub owns (own.go)
	sinks       atomic.Pointer[hubSinks] // Options.Sinks, once started
	clm         *cluster.Metrics         // registered in every mode
	shutdown    sync.Once
	shutErr     error

	skipFinalCheckpoint bool // tests: make Shutdown look like a crash after the last sync
	crashLeases         bool // tests: Shutdown hands no partition over (leases left to expire)
}

// New checks opts (after EnsureDefaults) and builds a Server; nothing is
// opened or started until Start.
func New(opts Options) (*Server, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if err := checkConsumerNames(opts.Consumers); err != nil {
		return nil, err
	}
	s := &Server{opts: opts, log: opts.Logger, reg: registry.New(opts.MaxStreamsPerDevice), applierReqs: make(chan applierReq),
		fatal: make(chan error, 1), done: make(chan struct{}), applyDone: make(chan struct{})}
	s.rejLog = rateLog{lim: lograte.Limiter{Every: opts.RejectLogInterval}, now: opts.Now}
	s.limiter = ratelimit.New(opts.MaxEventsPerSecond, opts.EventsBurst)
	if opts.NATS.Enabled() {
		s.cl = &clusterMode{}
	} else if opts.MQTTURL == "" {
		sec, err := opts.brokerSecurity()
		if err != nil {
			return nil, err
		}
		s.brokerSec = sec
	}
	s.views.New = func() any { return new(batchview.View) }
	m, err := newMetrics(opts.Registerer, s.reg.Counts)
	if err != nil {
		return nil, fmt.Errorf("register hub metrics: %w", err)
	}
	s.m = m
	if s.clm, err = cluster.NewMetrics(opts.Registerer); err != nil {
		return nil, fmt.Errorf("register hub metrics: %w", err)
	}
	if s.cl != nil {
		s.cl.Name, s.cl.Timeout, s.cl.Logger, s.cl.Metrics = opts.NATS.Log.Stream, opts.PublishTimeout, opts.Logger, s.clm
		if s.cl.bf.m, err = newBackfillMetrics(opts.Registerer); err != nil {
			return nil, fmt.Errorf("register hub metrics: %w", err)
		}
		n := opts.NATS.Log.Partitions
		s.cl.appliedMsgs = make([]atomic.Uint64, n)
		s.own = &ownership{n: n, gen: make([]atomic.Uint64, n), skipped: make([]atomic.Bool, n), parts: make([]ownPart, n), holders: make([]map[string]int64, n), wake: make(chan struct{}, 1), stop: make(chan struct{})}
		if s.own.m, err = newOwnMetrics(opts.Registerer); err != nil {
			return nil, fmt.Errorf("register hub metrics: %w", err)
		}
	}
	if s.dm, err = newDamageMetrics(opts.Registerer); err != nil {
		return nil, fmt.Errorf("register hub metrics: %w", err)
	}
	if err := opts.Registerer.Register(registry.NewFleetCollector(s.reg, s.opts.Now)); err != nil {
		return nil, fmt.Errorf("register fleet metrics: %w", err)
	}
	if err := s.defaultParts(); err != nil {
		return nil, err
	}
	if err := s.newEngine(); err != nil {
		return nil, err
	}
	if err := s.setupAttrs(); err != nil {
		return nil, err
	}
	if s.api, err = s.newAPI(); err != nil {
		return nil, fmt.Errorf("register query metrics: %w", err)
	}
	s.app = newApplier(s.reg, s.opts.Consumers, s.opts.ClockEstimator, s.opts.Limits)
	s.app.attrs = s.attrs
	if s.cl != nil {
		s.app.own = s.applyOwnEntry
	}
	if s.agg != nil {
		s.app.revise = engineReviser(s.agg.eng)
	}
	s.app.onPanic = func(name string, r any) {
		m.consumerPanics.Inc()
		s.log.Error("recovered panic in consumer", "consumer", name, "panic", r)
	}
	s.SetTimeService(s.opts.TimeService)
	return s, nil
}

// defaultParts creates the hub's clock estimator (DeviceClocks) and time
// service (TimeService, answering through Publish) unless opts set them.
func (s *Server) defaultParts() error {
	if s.opts.ClockEstimator == nil {
		dc, err := clockest.NewDeviceClocks(clockest.DeviceClocksOptions{})
		if err != nil {
			return err
		}
		s.opts.ClockEstimator = dc
	}
	if s.opts.TimeService == nil {
		ts, err := timeservice.NewTimeService(s.opts.Now, s.Publish, s.log)
		if err != nil {
			return err
		}
		s.opts.TimeService = ts
	}
	return nil
}

// newEngine creates the event-time engine when Options.Aggregate is set,
// appends it to the consumers and registers its metrics.
func (s *Server) newEngine() error {
	if s.opts.Aggregate == nil {
		return s.newRules() // an error when there are rules
	}
	agg, err := newAggregates(*s.opts.Aggregate, s.log, s.opts.Now)
	if err != nil {
		return fmt.Errorf("%w: Aggregate: %w", ErrInvalidOptions, err)
	}
	s.agg = agg
	s.opts.Consumers = append(slices.Clip(s.opts.Consumers), agg)
	if err := checkConsumerNames(s.opts.Consumers); err != nil {
		return err
	}
	if err := s.opts.Registerer.Register(agg.eng.Collector("edgeflow_aggregate")); err != nil {
		return fmt.Errorf("register aggregate metrics: %w", err)
	}
	return s.newRules()
}

// checkConsumerNames rejects empty or repeated consumer names.
func checkConsumerNames(cs []Consumer) error {
	seen := map[string]bool{}
	for i, c := range cs {
		if c == nil || c.Name() == "" || seen[c.Name()] {
			return fmt.Errorf("%w: Consumers[%d]: nil, unnamed or a repeated name", ErrInvalidOptions, i)
		}
		seen[c.Name()] = true
	}
	return nil
}

// SetTimeService sets the handler of time requests; it may be called while
// the server runs (the time service needs the server's Publish).
func (s *Server) SetTimeService(h TimeRequestHandler) { s.timeSvc.Store(&h) }

// timeService returns the current time request handler or nil.
func (s *Server) timeService() TimeRequestHandler {
	if p := s.timeSvc.Load(); p != nil {
		return *p
	}
	return nil
}

// Publish sends one message (QoS 1) through the server's transport, e.g. a
// time response. It fails before Start.
func (s *Server) Publish(topic string, payload []byte) error {
	if s.tr == nil {
		return errors.New("hub: not started")
	}
	return s.tr.Publish([]broker.Message{{Topic: topic, Payload: payload}})
}

// Run starts the server, waits until ctx is done or the log fails, and
// shuts down. It returns the log failure, if any, or the shutdown's error.
func (s *Server) Run(ctx context.Context) error {
	if err := s.Start(ctx); err != nil {
		return errors.Join(err, s.Shutdown(context.Background()))
	}
	return s.serve(ctx)
}

// serve is Run after Start: it waits for ctx or a failed log, then shuts
// down within ShutdownTimeout.
func (s *Server) serve(ctx context.Context) error {
	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-s.fatal:
		s.log.Error("hub stopping: the log failed", "err", runErr)
	}
	shutCtx, cancel := context.WithTimeout(context.Background(), s.opts.ShutdownTimeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Shutdown(shutCtx) }()
	select {
	case err := <-done:
		return errors.Join(runErr, err)
	case <-shutCtx.Done():
		return errors.Join(runErr, fmt.Errorf("hub: shutdown did not finish within %v (shutdown-timeout); stopping without it: what was acknowledged is durable and a restart replays the log after the last checkpoint (a store that cannot close is the usual cause: is the data directory %s still there and writable?)", s.opts.ShutdownTimeout, s.opts.DataDir))
	}
}

// Start serves HTTP, binds the embedded broker's listener, opens the
// store, recovers the state (checkpoint plus replay), starts the pipeline
// and connects the transport. /readyz turns ready once all of that is
// done and the broker connection is up. Binding comes first so that an
// address in use fails Start at once, not after a recovery that may take
// minutes on a large store.
func (s *Server) Start(ctx context.Context) error {
	if s.started {
		return errors.New("hub: already started")
	}
	s.started = true
	if err := s.startHTTP(); err != nil {
		return err
	}
	if err := s.bindBroker(); err != nil {
		return err
	}
	if s.cl != nil {
		id, err := ensureHubID(s.opts.DataDir, s.opts.HubID)
		if err != nil {
			return err
		}
		s.opts.HubID = id
	}
	st, err := hublog.OpenStoreSized(s.opts.DataDir, !s.opts.NoSync, s.log, badgerSizes(s.opts.Memory))
	if err != nil {
		return err
	}
	s.st = st
	if err := eventtime.EnsureIndex(st, s.opts.Limits, s.log); err != nil {
		return fmt.Errorf("hub store %s: %w", st.Dir, err)
	}
	if s.agg != nil {
		s.agg.store.Bind(st.DB)
	}
	if err := s.openAlertLog(); err != nil {
		return err
	}
	if err := s.recoverState(ctx); err != nil {
		return err
	}
	if err := s.checkAlertSeq(); err != nil {
		return err
	}
	if err := s.loadLogPositions(); err != nil {
		return err
	}
	s.recovered.Store(true)
	walPos := s.com.nextSeq - 1 // the committer owns nextSeq once the pipeline runs
	s.startPipeline()
	if err := s.startTransport(); err != nil {
		return err
	}
	if err := s.startCluster(ctx); err != nil {
		return err
	}
	s.startLoops()
	if err := s.startSinks(); err != nil {
		return err
	}
	if err := s.startAlertOutputs(); err != nil {
		return err
	}
	s.ready.Store(true)
	s.log.Info("hub started", "data_dir", s.opts.DataDir, "broker", s.brokerDesc(), "http", s.HTTPAddr(), "wal_position", walPos)
	return nil
}

// brokerDesc describes the transport for logs.
func (s *Server) brokerDesc() string {
	if s.cl != nil {
		return "NATS (cluster mode)"
	}
	if s.opts.MQTTURL != "" {
		return broker.RedactURL(s.opts.MQTTURL)
	}
	return "embedded " + s.BrokerAddr()
}

// startPipeline starts the decode workers, the committer, the applier and
// the ack publisher.
func (s *Server) startPipeline() {
	s.workers = make([]chan inMsg, s.opts.Workers)
	for i := range s.workers {
		s.workers[i] = make(chan inMsg, s.opts.QueueLen)
		s.workersWG.Add(1)
		go func(in <-chan inMsg) {
			defer s.workersWG.Done()
			s.decodeLoop(in)
		}(s.workers[i])
	}
	s.pipeWG.Add(3)
	go func() {
		defer s.pipeWG.Done()
		if err := s.com.run(); err != nil {
			s.ready.Store(false)
			select {
			case s.fatal <- err:
			default:
			}
		}
	}()
	go func() { defer s.pipeWG.Done(); defer close(s.applyDone); s.applyLoop() }()
	go func() { defer s.pipeWG.Done(); s.ackLoop() }()
}

// bindBroker binds the embedded broker's listener (nothing with an
// external broker or a transport set by the caller). The broker accepts on
// it once the state is recovered; until then a device's connection waits
// in the kernel's backlog, or times out and is retried.
func (s *Server) bindBroker() error {
	if s.tr != nil || s.opts.MQTTURL != "" || s.cl != nil {
		return nil
	}
	ln, err := net.Listen("tcp", s.opts.MQTTListen)
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("embedded broker listen %s: %w (another MQTT broker, such as Mosquitto, may listen there: give the hub a free address with mqtt-listen, e.g. :1884, or use that broker with mqtt-url)", s.opts.MQTTListen, err)
	}
	if err != nil {
		return fmt.Errorf("embedded broker listen %s: %w", s.opts.MQTTListen, err)
	}
	s.brokerLn = ln
	return nil
}

// startTransport creates the transport unless one was set, and starts it.
func (s *Server) startTransport() error {
	if s.tr == nil && s.cl != nil {
		if err := s.dialNATS(); err != nil {
			return err
		}
	}
	if s.tr == nil {
		if s.opts.MQTTURL == "" {
			tr, err := broker.NewSecureEmbeddedBroker(broker.EmbeddedOptions{Addr: s.opts.MQTTListen, Listener: s.brokerLn,
				MaxPacket: uint32(s.opts.Limits.MaxFrameBytes + 64<<10), ClientQueue: s.opts.MQTTClientQueue, Security: s.brokerSec,
				Registerer: s.opts.Registerer, Logger: s.log})
			if err != nil {
				return err
			}
			s.tr = tr
		} else {
			s.tr = broker.NewExternalBroker(broker.ExternalOptions{URL: s.opts.MQTTURL, ClientID: s.opts.ClientID,
				Username: s.opts.Username, Password: s.opts.Password, Group: s.opts.Group,
				TLS: broker.ExternalTLS{CAFile: s.opts.MQTTCAFile, CertFile: s.opts.MQTTCertFile, KeyFile: s.opts.MQTTKeyFile,
					ServerName: s.opts.MQTTServerName},
				Timeout: s.opts.PublishTimeout, Logger: s.log})
		}
	}
	if it, ok := s.tr.(broker.IdentifiedTransport); ok {
		return it.StartIdentified(s.handleFrom)
	}
	return s.tr.Start(s.handle)
}

// BrokerAddr returns the embedded broker's listen address ("" otherwise).
func (s *Server) BrokerAddr() string {
	if b, ok := s.tr.(broker.BrokerAddr); ok {
		return b.Addr()
	}
	if s.brokerLn != nil {
		return s.brokerLn.Addr().String()
	}
	return ""
}

// Ready reports whether recovery is done, the broker connection is up and
// the server is not shutting down.
func (s *Server) Ready() bool {
	return s.ready.Load() && s.tr != nil && s.tr.Connected() && (s.cl == nil || s.cl.NotReady() == "")
}

// Shutdown stops taking batches, lets the pipeline write, sync, apply and
// ack what it holds, writes a checkpoint and closes the store and the
// transport. The order is the one in the package doc.
func (s *Server) Shutdown(ctx context.Context) error {
	s.shutdown.Do(func() { s.shutErr = s.doShutdown(ctx) })
	return s.shutErr
}

func (s *Server) doShutdown(ctx context.Context) error {
	s.ready.Store(false)
	var errs []error
	s.stopOwnership(s.crashLeases)
	if s.tr != nil {
		s.tr.Pause()
	}
	s.stopCluster()
	s.closeInputs()
	close(s.done)
	s.loopsWG.Wait()
	if s.st != nil {
		if !s.skipFinalCheckpoint && s.com != nil {
			errs = append(errs, s.checkpointNow())
		}
		errs = append(errs, s.st.Close())
	}
	if s.tr != nil {
		errs = append(errs, s.tr.Close())
	} else if s.brokerLn != nil {
		s.brokerLn.Close() // bound, but Start failed before the broker took it
	}
	if s.httpSrv != nil {
		errs = append(errs, s.httpSrv.Shutdown(ctx))
	}
	s.log.Info("hub stopped")
	return errors.Join(errs...)
}

// closeInputs closes the pipeline from its inputs down and waits until
// every stage has finished.
func (s *Server) closeInputs() {
	s.inMu.Lock()
	s.inClosed = true
	s.inMu.Unlock()
	if s.workers == nil {
		return
	}
	for _, w := range s.workers {
		close(w)
	}
	s.workersWG.Wait()
	close(s.com.in)
	s.pipeWG.Wait()
}
