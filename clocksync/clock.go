package clocksync

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"edgeflow/wire/wirepb"
)

// Estimate is what a Clock knows about the device clock at one moment.
type Estimate struct {
	// Offset is true time minus the device wall clock: corrected time is
	// device time + Offset.
	Offset time.Duration
	// Uncertainty is the half-width of the interval around Offset that
	// holds the true offset. It grows with time since the last sample.
	Uncertainty time.Duration
	// Drift is the rate at which Offset changes, in parts per million
	// (positive: the device clock runs slow). Zero until it is known.
	Drift float64
	// Source names where the latest samples came from: NTP server
	// addresses, or "hub".
	Source string
	// Method is NTP or HUB_SYNC when the estimate is trusted, UNTRUSTED
	// when there is none or its uncertainty exceeds Options.MaxUncertainty.
	Method wirepb.TimeMethod
	// SampledAt is the corrected time of the latest sample in the fit
	// (zero if none).
	SampledAt time.Time
	// Mono is the monotonic time the estimate was computed for.
	Mono time.Duration
}

// Trusted reports whether Offset may be applied to event times.
func (e Estimate) Trusted() bool { return e.Method != wirepb.TimeMethod_TIME_METHOD_UNTRUSTED }

// Proto returns the estimate as the wire's ClockEstimate, for batches and
// status messages.
func (e Estimate) Proto() *wirepb.ClockEstimate {
	ce := &wirepb.ClockEstimate{
		OffsetNs:      int64(e.Offset),
		UncertaintyNs: int64(e.Uncertainty),
		DriftPpm:      e.Drift,
		Method:        e.Method,
	}
	if !e.SampledAt.IsZero() {
		ce.SampledAtNs = e.SampledAt.UnixNano()
	}
	return ce
}

// Clock estimates the error of the device clock from NTP and hub samples
// and corrects times with it. Run polls the sources; every other method is
// safe for concurrent use and never blocks on the network.
type Clock struct {
	opts      Options
	log       *slog.Logger
	boot      string
	bootKnown bool // boot is the system's, not a random stand-in
	metrics   *metrics

	soon   chan struct{} // PollSoon's wake-up, buffered 1
	synced chan struct{} // closed once the estimate is first trusted
	once   sync.Once

	model    atomic.Pointer[model]
	wallBase atomic.Int64 // wall minus mono (ns) at the last check
	reqID    atomic.Uint64

	mu      sync.Mutex // serialises rounds; guards est, servers, savedAt, saveDue
	est     *estimator
	servers []*server
	savedAt time.Duration // monotonic time of the last state write, -1 none
	saveDue bool          // a round changed the estimate since that write
}

// New validates opts and returns a Clock that has no estimate yet: call
// Run (or Poll) to get one.
func New(opts Options) (*Clock, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	c := &Clock{opts: opts, log: opts.Logger.With("component", "clocksync"), boot: opts.BootID, bootKnown: true,
		soon: make(chan struct{}, 1), synced: make(chan struct{}), savedAt: -1}
	if c.boot == "" {
		id, err := ReadBootID()
		if err != nil {
			id = RandomBootID()
			c.bootKnown = false
			c.log.Warn("no boot id: events will not be repaired across restarts", "err", err, "boot_id", id)
		}
		c.boot = id
	}
	c.est = newEstimator(&c.opts)
	for _, addr := range opts.Servers {
		c.servers = append(c.servers, &server{addr: addr})
	}
	m, err := newMetrics(c, opts.Registerer)
	if err != nil {
		return nil, err
	}
	c.metrics = m
	c.wallBase.Store(c.opts.Wall().UnixNano() - int64(c.opts.Mono()))
	if opts.StatePath != "" {
		c.restore()
		c.noteTrusted(c.model.Load())
	}
	return c, nil
}

// Synced is closed once the estimate is first trusted (restored or from a
// round), so a caller can wait, bounded, for it before its first upload.
func (c *Clock) Synced() <-chan struct{} { return c.synced }

// PollSoon makes Run start its next round now rather than after its
// interval: for when a time source has just become reachable (the hub's
// time connection is up). It never blocks.
func (c *Clock) PollSoon() {
	select {
	case c.soon <- struct{}{}:
	default:
	}
}

// noteTrusted closes Synced if m is trusted now.
func (c *Clock) noteTrusted(m *model) {
	if m != nil && m.uncertainty(c.opts.Mono()) <= c.opts.MaxUncertainty {
		c.once.Do(func() { close(c.synced) })
	}
}

// BootID returns the boot id that this Clock's monotonic times belong to.
func (c *Clock) BootID() string { return c.boot }

// Estimate returns the current estimate of the device clock's error.
func (c *Clock) Estimate() Estimate {
	mono, wall, slack := c.read()
	m := c.model.Load()
	e := c.estimateAt(m, mono, wall)
	if m != nil {
		e.Uncertainty += slack
	}
	return e
}

// Now returns the corrected current time, or the device wall clock when
// the clock is not trusted.
func (c *Clock) Now() time.Time {
	mono, wall, _ := c.read()
	m := c.model.Load()
	if m == nil || m.uncertainty(mono) > c.opts.MaxUncertainty {
		return wall
	}
	return time.Unix(0, m.trueTime(mono))
}

// read samples both clocks and checks them for a wall-clock step. The wall
// clock is read between two monotonic readings, whose midpoint is
// returned with half their distance as slack: a reader preempted between
// two reads would otherwise pair times that are far apart.
func (c *Clock) read() (mono time.Duration, wall time.Time, slack time.Duration) {
	m1 := c.opts.Mono()
	wall = c.opts.Wall()
	m2 := c.opts.Mono()
	mono = m1 + (m2-m1)/2
	slack = (m2 - m1 + 1) / 2
	c.checkStep(mono, wall)
	return mono, wall, slack
}

// checkStep compares wall against monotonic progress since the last check
// and reports a step. The fit is on monotonic time, so a wall step changes
// the offset but invalidates no sample.
func (c *Clock) checkStep(mono time.Duration, wall time.Time) bool {
	base := wall.UnixNano() - int64(mono)
	old := c.wallBase.Load()
	step := time.Duration(base - old)
	if step.Abs() <= c.opts.StepThreshold {
		return false
	}
	if !c.wallBase.CompareAndSwap(old, base) {
		return false // another caller saw and reported the same step
	}
	c.metrics.steps.WithLabelValues("wall").Inc()
	c.log.Warn("device wall clock stepped", "step", step, "wall", wall)
	return true
}

func (c *Clock) estimateAt(m *model, mono time.Duration, wall time.Time) Estimate {
	e := Estimate{Method: wirepb.TimeMethod_TIME_METHOD_UNTRUSTED, Mono: mono}
	if m == nil {
		return e
	}
	e.Offset = time.Duration(m.trueTime(mono) - wall.UnixNano())
	e.Uncertainty = m.uncertainty(mono)
	e.Drift = m.drift * 1e6
	e.Source = m.source
	e.SampledAt = time.Unix(0, m.trueTime(m.lastMono))
	if e.Uncertainty <= c.opts.MaxUncertainty {
		e.Method = m.method
	}
	return e
}

// Run polls the sources until ctx ends: at once, then quickly while the
// clock is untrusted or its drift unknown, every PollInterval after that,
// each interval spread by PollJitter, and at once after PollSoon. It
// returns nil when ctx ends, after writing the state file if a round
// since its last write is not in it.
func (c *Clock) Run(ctx context.Context) error {
	defer c.flushState()
	for {
		if err := c.Poll(ctx); err != nil && ctx.Err() == nil {
			c.log.Debug("time round failed", "err", err)
		}
		t := time.NewTimer(c.nextInterval())
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		case <-c.soon:
			t.Stop()
		}
	}
}

// flushState writes the state file if a round was left out of it by
// StateInterval.
func (c *Clock) flushState() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.saveDue {
		c.maybeSave(c.opts.Mono(), true)
	}
}

func (c *Clock) nextInterval() time.Duration {
	d := c.opts.PollInterval
	m := c.model.Load()
	if m == nil || !m.driftKnown || m.uncertainty(c.opts.Mono()) > c.opts.MaxUncertainty {
		d = c.opts.StartupPollInterval
	}
	j := c.opts.PollJitter * (2*rand.Float64() - 1)
	return time.Duration(float64(d) * (1 + j))
}

// Poll runs one round: it queries every NTP server that is not held off,
// falls back to the hub when none answers, and feeds the valid samples to
// the estimator. It returns nil when the estimate was updated.
func (c *Clock) Poll(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	round := c.queryServers(ctx)
	kind := "ntp"
	if len(round) == 0 && c.opts.Hub != nil && ctx.Err() == nil {
		kind = "hub"
		s, err := c.queryHub(ctx)
		if err != nil {
			c.metrics.samples.WithLabelValues("hub", "error").Inc()
			c.log.Debug("hub time exchange failed", "err", err)
		} else {
			c.metrics.samples.WithLabelValues("hub", "ok").Inc()
			round = append(round, s)
		}
	}
	if len(round) == 0 {
		c.metrics.rounds.WithLabelValues("no_source").Inc()
		return ErrNoSource
	}
	mono := c.opts.Mono()
	cur := c.model.Load()
	next, res, used := c.est.addRound(round, cur, mono)
	if len(used) < len(round) && res != roundRejected {
		c.metrics.samples.WithLabelValues(kind, "falseticker").Add(float64(len(round) - len(used)))
	}
	switch res {
	case roundRejected:
		c.metrics.rounds.WithLabelValues("rejected").Inc()
		c.log.Warn("time sources disagree; round dropped", "samples", len(round))
		return ErrNoMajority
	case roundSuspect:
		c.metrics.rounds.WithLabelValues("suspect").Inc()
		c.log.Warn("time round disagrees with the estimate; held pending confirmation", "source", used[0].source)
		return ErrSuspect
	case roundSourceStep:
		c.metrics.rounds.WithLabelValues("source_step").Inc()
		c.metrics.steps.WithLabelValues("source").Inc()
		if cur != nil {
			c.log.Warn("time source stepped; samples before the step discarded",
				"step", time.Duration(next.predict(mono)-cur.predict(mono)))
		}
	default:
		c.metrics.rounds.WithLabelValues("accepted").Inc()
	}
	c.model.Store(next)
	c.noteTrusted(next)
	c.maybeSave(mono, false)
	if cur == nil || (cur.uncertainty(mono) > c.opts.MaxUncertainty) != (next.uncertainty(mono) > c.opts.MaxUncertainty) {
		est := c.estimateAt(next, mono, c.opts.Wall())
		c.log.Info("clock estimate", "trusted", est.Trusted(), "offset", est.Offset,
			"uncertainty", est.Uncertainty, "source", est.Source)
	}
	return nil
}

// wrapRound adds the source to an error of one query.
func wrapRound(kind, addr string, err error) error {
	return fmt.Errorf("%s %s: %w", kind, addr, err)
}
