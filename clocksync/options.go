package clocksync

import (
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Options configure a Clock. Zero values take the defaults noted per field;
// New calls EnsureDefaults and Validate.
type Options struct {
	// Servers are the NTP servers to query, "host" or "host:port" (port 123
	// by default). May be empty when Hub is set.
	Servers []string
	// Hub, if set, is asked for the time when no NTP server answers a round.
	Hub HubExchanger

	// PollInterval is the time between rounds once the clock is trusted and
	// the drift is known. Default 64 s (NTP's minimum poll).
	PollInterval time.Duration
	// StartupPollInterval is the time between rounds before that, so a
	// freshly booted device syncs within seconds. Default 2 s.
	StartupPollInterval time.Duration
	// PollJitter spreads rounds by up to this fraction of the interval
	// either way, so a fleet that booted together does not poll in step.
	// Default 0.1; must be in [0, 0.5].
	PollJitter float64
	// QueryTimeout bounds one NTP query. Default 2 s.
	QueryTimeout time.Duration
	// HubTimeout bounds one hub time exchange. Default 5 s.
	HubTimeout time.Duration
	// KissHold is how long a server that sent a DENY or RSTR kiss code is
	// left alone. A RATE kiss holds the server for 4 poll intervals.
	// Default 1 h.
	KissHold time.Duration

	// WindowSize bounds the samples kept for the fit. Default 64.
	WindowSize int
	// MaxSampleAge drops samples older than this (monotonic time) from the
	// fit. Default 6 h.
	MaxSampleAge time.Duration
	// MaxDelay rejects samples whose round-trip delay exceeds it: their
	// error bound is too wide to be worth keeping. Default 1 s.
	MaxDelay time.Duration
	// MaxUncertainty is the uncertainty above which the clock is not
	// trusted: events are stamped UNTRUSTED rather than with a correction
	// that wide. Default 10 s.
	MaxUncertainty time.Duration
	// DriftBoundPPM bounds how far the drift may wander from its estimate
	// between samples (temperature, ageing), in parts per million. The
	// uncertainty widens at this rate (plus the drift's standard error)
	// with time since a sample. Default 15 (NTP's PHI).
	DriftBoundPPM float64
	// MaxDriftPPM bounds the drift of an uncalibrated clock, used until
	// the window spans enough time to estimate the drift. Default 500
	// (NTP's maximum frequency tolerance).
	MaxDriftPPM float64
	// StepThreshold is the change of wall minus monotonic time taken as a
	// wall-clock step. Default 128 ms (ntpd's step threshold).
	StepThreshold time.Duration
	// StepConfirm is how many rounds in a row must disagree with the fit
	// before it is taken as a step of the time source and restarted.
	// Default 3.
	StepConfirm int

	// Wall is the device's wall clock. Default time.Now.
	Wall func() time.Time
	// Mono is the device's monotonic clock since boot, counting suspend.
	// Default MonoNow. Must belong to BootID's boot.
	Mono func() time.Duration
	// BootID identifies the boot Mono counts from; events with another
	// boot id are never re-timed through their monotonic time. Default:
	// ReadBootID, or a random id unique to this Clock if that fails (so
	// nothing is repaired across a restart that cannot prove its boot).
	BootID string
	// StatePath, if set, is the file that keeps the estimator's samples
	// with their boot id across process restarts: New restores them when
	// the boot id matches (the fit is of true time against the monotonic
	// clock of that boot, so it still holds, its uncertainty grown by the
	// drift bound since), and ignores them after a reboot or when the boot
	// id is unknown. Written atomically after rounds that changed the
	// estimate. Default "" (not kept).
	StatePath string
	// StateInterval is the least monotonic time between writes of
	// StatePath. Default 10 s.
	StateInterval time.Duration
	// Dialer, if set, replaces the UDP dialer of NTP queries (tests, or
	// binding to one interface). See ntp.QueryOptions.Dialer.
	Dialer func(localAddress, remoteAddress string) (net.Conn, error)
	// Logger receives state changes and warnings. Default slog.Default().
	Logger *slog.Logger
	// Registerer, if set, receives the Clock's Prometheus metrics.
	Registerer prometheus.Registerer
}

// EnsureDefaults fills zero fields with their defaults. It does not set
// BootID; New does, because reading it can fail.
func (o *Options) EnsureDefaults() {
	setDur := func(p *time.Duration, d time.Duration) {
		if *p == 0 {
			*p = d
		}
	}
	setDur(&o.PollInterval, 64*time.Second)
	setDur(&o.StartupPollInterval, 2*time.Second)
	setDur(&o.QueryTimeout, 2*time.Second)
	setDur(&o.HubTimeout, 5*time.Second)
	setDur(&o.KissHold, time.Hour)
	setDur(&o.MaxSampleAge, 6*time.Hour)
	setDur(&o.MaxDelay, time.Second)
	setDur(&o.MaxUncertainty, 10*time.Second)
	setDur(&o.StepThreshold, 128*time.Millisecond)
	setDur(&o.StateInterval, 10*time.Second)
	if o.PollJitter == 0 {
		o.PollJitter = 0.1
	}
	if o.WindowSize == 0 {
		o.WindowSize = 64
	}
	if o.DriftBoundPPM == 0 {
		o.DriftBoundPPM = 15
	}
	if o.MaxDriftPPM == 0 {
		o.MaxDriftPPM = 500
	}
	if o.StepConfirm == 0 {
		o.StepConfirm = 3
	}
	if o.Wall == nil {
		o.Wall = time.Now
	}
	if o.Mono == nil {
		o.Mono = MonoNow
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Validate names the first field that is out of range.
func (o *Options) Validate() error {
	if len(o.Servers) == 0 && o.Hub == nil {
		return fmt.Errorf("clocksync: Servers is empty and Hub is nil: need at least one time source")
	}
	for i, s := range o.Servers {
		if s == "" {
			return fmt.Errorf("clocksync: Servers[%d] is empty", i)
		}
	}
	positive := []struct {
		name string
		d    time.Duration
	}{
		{"PollInterval", o.PollInterval},
		{"StartupPollInterval", o.StartupPollInterval},
		{"QueryTimeout", o.QueryTimeout},
		{"HubTimeout", o.HubTimeout},
		{"KissHold", o.KissHold},
		{"MaxSampleAge", o.MaxSampleAge},
		{"MaxDelay", o.MaxDelay},
		{"MaxUncertainty", o.MaxUncertainty},
		{"StepThreshold", o.StepThreshold},
		{"StateInterval", o.StateInterval},
	}
	for _, p := range positive {
		if p.d <= 0 {
			return fmt.Errorf("clocksync: %s %v: want a positive duration", p.name, p.d)
		}
	}
	if o.StartupPollInterval > o.PollInterval {
		return fmt.Errorf("clocksync: StartupPollInterval %v exceeds PollInterval %v", o.StartupPollInterval, o.PollInterval)
	}
	if o.PollJitter < 0 || o.PollJitter > 0.5 {
		return fmt.Errorf("clocksync: PollJitter %v: want 0..0.5", o.PollJitter)
	}
	if o.WindowSize < 4 || o.WindowSize > 4096 {
		return fmt.Errorf("clocksync: WindowSize %d: want 4..4096", o.WindowSize)
	}
	if o.DriftBoundPPM < 0 || o.DriftBoundPPM > 1000 {
		return fmt.Errorf("clocksync: DriftBoundPPM %v: want 0..1000", o.DriftBoundPPM)
	}
	if o.MaxDriftPPM < o.DriftBoundPPM || o.MaxDriftPPM > 10000 {
		return fmt.Errorf("clocksync: MaxDriftPPM %v: want DriftBoundPPM..10000", o.MaxDriftPPM)
	}
	if o.StepConfirm < 1 || o.StepConfirm > 100 {
		return fmt.Errorf("clocksync: StepConfirm %d: want 1..100", o.StepConfirm)
	}
	if o.Wall == nil || o.Mono == nil || o.Logger == nil {
		return fmt.Errorf("clocksync: Wall, Mono and Logger must be set (call EnsureDefaults)")
	}
	return nil
}
