package simulator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"edgeflow/buffer"
	"edgeflow/uplink"
)

// Options configure a Fleet. Zero values take the defaults noted per field.
type Options struct {
	// Scenario is the fleet to simulate; New fills its defaults.
	Scenario Scenario
	// Brokers are the MQTT broker URLs the devices connect to, e.g.
	// tcp://127.0.0.1:1884 (hubd's embedded broker). Required. With
	// several, device i tries them in order starting at the (i mod n)th,
	// so the fleet spreads over the brokers of a cluster (the NATS
	// servers' MQTT listeners) and fails over to the next one.
	Brokers []string
	// DataDir is the one Badger directory all devices' buffers share.
	// Required.
	DataDir string
	// Durability of appends. Default buffer.DurabilityInterval.
	Durability buffer.Durability
	// Workers is how many goroutines drive the devices (each owns a shard
	// and appends for it). Default min(devices, 64).
	Workers int
	// Tick is how often a worker looks at its devices. Default 20ms; less
	// than the scenario's boundary guard.
	Tick time.Duration
	// ReportEvery is the period of progress reports. Default 1s.
	ReportEvery time.Duration
	// OnReport, if set, receives a progress report every ReportEvery.
	OnReport func(Report)
	// Now is the true time. Default time.Now. Timers use the runtime's
	// clock, so a test may shift Now but not speed it up.
	Now func() time.Time
	// Logger receives the simulator's messages. Default slog.Default().
	Logger *slog.Logger
	// HubURL, if set (http://host:port), is the hub's HTTP API: the fleet
	// then probes how long events take to become visible in its
	// aggregates (Report.Visible). The hub must hold the devices' data
	// under the scenario's resolution.
	HubURL string
	// HubURLs are further hubs of a cluster (any of them answers for the
	// whole fleet): a probe whose query fails counts as failed and the
	// next probe asks the next hub, so a killed hub does not end the
	// probes.
	HubURLs []string
	// ProbeEvery is the period of visibility probes. Default 1s.
	ProbeEvery time.Duration
	// ProbeTimeout is how long a probe waits for its event before it
	// counts as timed out. Default 1m.
	ProbeTimeout time.Duration
	// AgentLogLevel is the least level of the agent parts' (uplink,
	// clocksync) messages that reach Logger: thousands of agents repeat
	// themselves. Default slog.LevelError.
	AgentLogLevel slog.Level
}

// EnsureDefaults fills zero fields with their defaults.
func (o *Options) EnsureDefaults() {
	o.Scenario.EnsureDefaults()
	def(&o.Durability, buffer.DurabilityInterval)
	def(&o.Workers, min(o.Scenario.Devices, 64))
	def(&o.Tick, 20*time.Millisecond)
	def(&o.ReportEvery, time.Second)
	def(&o.ProbeEvery, time.Second)
	def(&o.ProbeTimeout, time.Minute)
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	def(&o.AgentLogLevel, slog.LevelError)
}

// Validate names the first field that is out of range.
func (o *Options) Validate() error {
	if err := o.Scenario.Validate(); err != nil {
		return err
	}
	if len(o.Brokers) == 0 {
		return errors.New("simulator: Brokers: at least one MQTT URL is required")
	}
	for _, b := range o.Brokers {
		if u, err := url.Parse(b); err != nil || u.Host == "" {
			return fmt.Errorf("simulator: Brokers: %q is not a URL like tcp://127.0.0.1:1884", b)
		}
	}
	if o.DataDir == "" {
		return errors.New("simulator: DataDir: required")
	}
	if o.Workers < 1 {
		return fmt.Errorf("simulator: Workers %d: want at least 1", o.Workers)
	}
	if o.Tick < time.Millisecond || (o.Scenario.BoundaryGuard > 0 && o.Tick >= o.Scenario.BoundaryGuard) {
		return fmt.Errorf("simulator: Tick %v: want 1ms..boundary_guard (%v)", o.Tick, o.Scenario.BoundaryGuard)
	}
	if o.HubURL == "" && len(o.HubURLs) > 0 {
		return errors.New("simulator: HubURLs without HubURL")
	}
	for _, h := range append([]string{o.HubURL}, o.HubURLs...) {
		if h == "" {
			continue
		}
		if u, err := url.Parse(h); err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return fmt.Errorf("simulator: hub URL %q: want http://host:port", h)
		}
	}
	if o.ProbeEvery < 10*time.Millisecond || o.ProbeTimeout < time.Second {
		return fmt.Errorf("simulator: ProbeEvery %v / ProbeTimeout %v: want at least 10ms / 1s", o.ProbeEvery, o.ProbeTimeout)
	}
	if o.ReportEvery < 10*time.Millisecond {
		return fmt.Errorf("simulator: ReportEvery %v: want at least 10ms", o.ReportEvery)
	}
	return nil
}

// Fleet runs a scenario's devices in one process: every device has its
// own stream in one shared buffer store, its own clock estimator and its
// own uplink with its own MQTT connection; the uplinks share one Metrics.
type Fleet struct {
	opts    Options
	sc      Scenario
	log     *slog.Logger
	quiet   *slog.Logger
	store   *buffer.Store
	reg     *prometheus.Registry
	metrics *uplink.Metrics
	devices []*device

	runCtx context.Context

	appended, acked           atomic.Uint64
	agentStarts, uplinkStarts atomic.Uint64
	powerLosses               atomic.Uint64
	preloadTotal              atomic.Uint64
	preloadAcked              atomic.Uint64
	preloadDone               atomic.Int64 // Unix ns when the preload was all acked
	latency, stampErr         Histogram
	steady, visible           Histogram    // steady-state ack latency; probed visibility latency
	ackReturn                 Histogram    // steady state: hub's ack stamp to the uplink applying it, per ack
	steadyFrom                atomic.Int64 // Unix ns from which appends count as steady state
	prober                    *prober      // nil without Options.HubURL

	mu       sync.Mutex
	start    time.Time
	uplinkAt time.Time // when uplinks first started (after preload)
	last     Report
	// lastLatency is latency's counts at the last report, for
	// Report.AckLatencyRecent.
	lastLatency histCounts
}

// Gatherer gives the fleet's agent metrics (package uplink's, summed over
// every device), for a /metrics endpoint beside a load run.
func (f *Fleet) Gatherer() prometheus.Gatherer { return f.reg }

// New opens the shared store and creates the devices (their streams and
// models); Run starts them.
func New(o Options) (*Fleet, error) {
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	store, err := buffer.Open(o.DataDir, buffer.Options{Durability: o.Durability, BlockCompression: uplink.BufferBlocks(o.Scenario.Uplink.Compression), // as the agent's "auto"
		SyncInterval: o.Scenario.Buffer.SyncInterval, Logger: o.Logger, Now: o.Now})
	if err != nil {
		return nil, fmt.Errorf("simulator: open shared buffer: %w", err)
	}
	reg := prometheus.NewRegistry()
	m, err := uplink.NewMetrics(reg)
	if err != nil {
		store.Close()
		return nil, err
	}
	f := &Fleet{opts: o, sc: o.Scenario, log: o.Logger, quiet: discardLogger(o.AgentLogLevel, o.Logger), store: store, reg: reg, metrics: m, runCtx: context.Background()}
	f.steadyFrom.Store(math.MaxInt64)
	if o.HubURL != "" {
		f.prober = newProber(f, append([]string{o.HubURL}, o.HubURLs...), o.ProbeEvery, o.ProbeTimeout)
	}
	classes := assignClasses(&f.sc)
	for i := range f.sc.Devices {
		d, err := newDevice(f, i, &f.sc.Classes[classes[i]], rand.New(rand.NewPCG(o.Scenario.Seed, uint64(i)+1)))
		if err != nil {
			store.Close()
			return nil, err
		}
		f.devices = append(f.devices, d)
	}
	return f, nil
}

// assignClasses gives each device a class in proportion to the shares,
// interleaved so any prefix of the fleet has every class.
func assignClasses(s *Scenario) []int {
	total := 0.0
	for _, c := range s.Classes {
		total += c.Share
	}
	out := make([]int, s.Devices)
	acc := make([]float64, len(s.Classes))
	for i := range out {
		best := 0
		for j, c := range s.Classes {
			acc[j] += c.Share / total
			if acc[j] > acc[best] {
				best = j
			}
		}
		acc[best]--
		out[i] = best
	}
	return out
}

// brokersFor is device idx's broker list: Options.Brokers rotated to start
// at the (idx mod n)th.
func (f *Fleet) brokersFor(idx int) []string {
	b := f.opts.Brokers
	k := idx % len(b)
	return append(append([]string(nil), b[k:]...), b[:k]...)
}

// uplinkOptions are device idx's uplink options from the scenario.
func (f *Fleet) uplinkOptions(device string, idx int) uplink.Options {
	t := f.sc.Uplink
	ackQoS := 0 // the uplink's default, 1
	if t.AckQoS != nil && *t.AckQoS == 0 {
		ackQoS = uplink.AckQoSAtMostOnce
	}
	return uplink.Options{
		DeviceID: device, Brokers: f.brokersFor(idx), ClientID: "fleetsim-" + device,
		MaxBatchEvents: t.MaxBatchEvents, Linger: t.Linger, Window: t.Window, AckTimeout: t.AckTimeout,
		PollInterval: t.PollInterval, BackoffMin: t.BackoffMin, BackoffMax: t.BackoffMax, KeepAlive: t.KeepAlive, Compression: t.Compression,
		AckQoS:         ackQoS,
		ConnectTimeout: 10 * time.Second, Metrics: f.metrics, Logger: f.quiet, Version: "fleetsim",
	}
}

// Run preloads the buffers, runs the scenario for its (scaled) duration,
// then lets every backlog drain (all links up, no new events) for at most
// DrainTimeout, stops the devices and returns the final report. Ending
// ctx stops the run early (the report says so).
func (f *Fleet) Run(ctx context.Context) (Report, error) {
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	f.runCtx = runCtx
	start := f.opts.Now()
	if err := f.preload(runCtx, start); err != nil {
		return Report{}, err
	}
	f.mu.Lock()
	f.start, f.uplinkAt = f.opts.Now(), time.Now()
	f.mu.Unlock()
	steadyFrom := f.uplinkAt.Add(f.sc.scaled(f.sc.RampUp + f.sc.Warmup))
	f.steadyFrom.Store(steadyFrom.UnixNano())
	probeDone := make(chan struct{})
	if f.prober != nil {
		go func() { defer close(probeDone); f.prober.run(runCtx, steadyFrom) }()
	} else {
		close(probeDone)
	}

	duration := f.sc.scaled(f.sc.Duration)
	var producing atomic.Bool
	producing.Store(true)
	var passes sync.RWMutex // held (read) by each worker's pass over its devices
	var wg sync.WaitGroup
	shards := f.opts.Workers
	for w := range shards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.work(runCtx, w, shards, &producing, &passes)
		}()
	}
	repDone := make(chan struct{})
	repCtx, stopRep := context.WithCancel(context.Background())
	go func() {
		defer close(repDone)
		f.reportLoop(repCtx, &producing)
	}()

	phase := "run"
	select {
	case <-time.After(duration):
		producing.Store(false)
		// A pass that read producing before the store may still append:
		// wait for those to end, so the drain cannot see an empty backlog
		// that one more event then joins, never to be sent.
		passes.Lock()
		passes.Unlock()
		phase = "drained"
		if !f.waitDrain(runCtx) {
			phase = "drain_timeout"
		}
	case <-runCtx.Done():
	}
	if ctx.Err() != nil {
		phase = "interrupted"
	}
	cancel()
	wg.Wait()
	<-probeDone
	var swg sync.WaitGroup
	for _, d := range f.devices {
		swg.Add(1)
		go func() {
			defer swg.Done()
			d.shutdown()
		}()
	}
	swg.Wait()
	stopRep()
	<-repDone
	r := f.snapshot(phase)
	return r, nil
}

// work drives shard w of the devices every Tick until ctx ends. Each pass
// holds passes (read), so Run can wait for the passes that still saw
// producing set.
func (f *Fleet) work(ctx context.Context, w, shards int, producing *atomic.Bool, passes *sync.RWMutex) {
	t := time.NewTicker(f.opts.Tick)
	defer t.Stop()
	for {
		now := f.opts.Now()
		el := now.Sub(f.start)
		passes.RLock()
		p := producing.Load()
		for i := w; i < len(f.devices); i += shards {
			if ctx.Err() != nil {
				passes.RUnlock()
				return
			}
			f.devices[i].tick(now, el, p)
		}
		passes.RUnlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// preload appends every device's history, in parallel.
func (f *Fleet) preload(ctx context.Context, start time.Time) error {
	var total uint64
	for _, d := range f.devices {
		if d.class.Preload > 0 {
			total++
		}
	}
	if total == 0 {
		return nil
	}
	f.log.Info("simulator: preloading buffers", "devices", total)
	var (
		wg   sync.WaitGroup
		errs = make([]error, f.opts.Workers)
	)
	for w := range f.opts.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(f.devices); i += f.opts.Workers {
				if err := f.devices[i].preload(ctx, start); err != nil {
					errs[w] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	var n uint64
	for _, d := range f.devices {
		n += d.ws.preloadEnd - min(d.ws.preloadEnd, d.ws.acked)
	}
	f.preloadTotal.Store(n)
	return errors.Join(errs...)
}

// waitDrain waits until every stream is acknowledged through its last
// append, or DrainTimeout.
func (f *Fleet) waitDrain(ctx context.Context) bool {
	deadline := time.Now().Add(f.sc.DrainTimeout)
	for time.Now().Before(deadline) {
		if f.backlog() == 0 {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(100 * time.Millisecond):
		}
	}
	return f.backlog() == 0
}

func (f *Fleet) backlog() uint64 {
	var n uint64
	for _, d := range f.devices {
		s := d.st.Stats()
		n += s.Next - 1 - s.Acked
	}
	return n
}

// Truth returns the ground truth; call it after Run.
func (f *Fleet) Truth() *Truth {
	t := &Truth{Scenario: f.sc.Name, Resolution: f.sc.Resolution, Windows: f.sc.Verify.Windows}
	seen := map[string]bool{}
	for _, c := range f.sc.Classes {
		for _, m := range c.Metrics {
			if !seen[m.Name] {
				seen[m.Name] = true
				t.Metrics = append(t.Metrics, m.Name)
			}
		}
	}
	for _, d := range f.devices {
		t.Devices = append(t.Devices, d.truth)
	}
	return t
}

// AgentDropped is the number of events the agents' buffers dropped (their
// bound), which the hub learns of as gaps.
func (f *Fleet) AgentDropped() uint64 {
	var n uint64
	for _, d := range f.devices {
		n += d.st.Stats().Dropped
	}
	return n
}

// StampError summarises |corrected capture time - true time| of the events
// the agents stamped trusted.
func (f *Fleet) StampError() Quantiles { return f.stampErr.Summary() }

// Close closes the shared buffer store.
func (f *Fleet) Close() error { return f.store.Close() }
