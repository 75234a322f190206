package simulator

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"edgeflow/wire"
)

// Scenario describes a simulated fleet: how many devices, what they measure,
// how their clocks and links misbehave, and how long the run lasts. It is
// what a configs/fleetsim-*.yaml file holds (keys in snake_case, as the
// mapstructure tags say). Every duration that describes the run (Duration,
// outage and crash times, clock steps, power losses) is divided by
// TimeScale; event rates, drift and Preload are not (see the package
// documentation).
type Scenario struct {
	// Name labels reports. Default "custom".
	Name string `mapstructure:"name"`
	// Devices is the fleet size. Default 100.
	Devices int `mapstructure:"devices"`
	// RampUp boots the devices one after another, evenly over this long
	// (scenario time), as a fleet installed over a day comes online, rather
	// than all in the first tick. A device produces nothing before it
	// boots. Default 0: all at once.
	RampUp time.Duration `mapstructure:"ramp_up"`
	// Warmup is how long after the ramp-up the report's steady-state
	// figures (ack_latency_steady, visible_latency) start counting.
	// Default 0.
	Warmup time.Duration `mapstructure:"warmup"`
	// DevicePrefix names devices DevicePrefix-00000, ... Default "sim".
	DevicePrefix string `mapstructure:"device_prefix"`
	// Duration is how long devices produce events (scenario time). Default 1m.
	Duration time.Duration `mapstructure:"duration"`
	// TimeScale compresses scenario time: 60 runs an hour-long outage in a
	// real minute. Default 1; at least 1.
	TimeScale float64 `mapstructure:"time_scale"`
	// Seed makes device models and schedules reproducible. Default 1.
	Seed uint64 `mapstructure:"seed"`
	// Resolution is the hub's aggregate base resolution: every verified
	// window is a multiple of it, and events are never generated within
	// BoundaryGuard of one of its boundaries. Default 10s.
	Resolution time.Duration `mapstructure:"resolution"`
	// BoundaryGuard keeps event true times this far from resolution
	// boundaries, so a correction error smaller than it cannot move an
	// event into the neighbouring window. Default 100ms; less than
	// Resolution/4.
	BoundaryGuard time.Duration `mapstructure:"boundary_guard"`
	// DrainTimeout bounds the wait, after Duration, for every backlog to
	// reach the hub. Default 2m (real time, not scaled).
	DrainTimeout time.Duration `mapstructure:"drain_timeout"`
	// FleetOutage, if For is set, takes every device's link down at the
	// same moment and brings them back together, as a regional network
	// outage would. Each agent closes its uplink (offline status, clean
	// DISCONNECT) and opens a new one when its link returns, which
	// connects at once: the devices come back within a tick of each
	// other, not through the uplink's backoff. For a hub that goes away
	// while the devices' networks stay up, see HubOutage.
	FleetOutage Outage `mapstructure:"fleet_outage"`
	// HubOutage, if For is set, is the hub (its broker) unreachable from
	// the whole fleet from At for For: every device's broker connection
	// is cut at the same moment, without a DISCONNECT (the broker, which
	// in fact stays up, publishes the devices' last wills), and every dial
	// is refused (connection refused) until the outage ends. The agents
	// and their uplinks keep running, so each uplink goes through its own
	// reconnect path, exponential backoff with full jitter between
	// Uplink.BackoffMin and BackoffMax, and the fleet comes back spread
	// over up to BackoffMax: a mass reconnect after a hub outage. Devices'
	// links and NTP stay up; the hub's time service is down with the hub.
	HubOutage Outage `mapstructure:"hub_outage"`
	// Classes are the device kinds; each gets Share of the fleet.
	// Default: one class of defaults.
	Classes []DeviceClass `mapstructure:"classes"`
	// Uplink tunes every device's uplink.
	Uplink UplinkTuning `mapstructure:"uplink"`
	// Buffer tunes the devices' buffers (one Badger store for the fleet).
	Buffer BufferTuning `mapstructure:"buffer"`
	// Verify says which windows the verifier checks.
	Verify VerifySpec `mapstructure:"verify"`
}

// DeviceClass is one kind of device in a scenario.
type DeviceClass struct {
	// Name labels the class. Default "class<i>".
	Name string `mapstructure:"name"`
	// Share is the class's weight; devices are split in proportion.
	// Default 1.
	Share float64 `mapstructure:"share"`
	// Metrics are what each device of the class measures. Default: one
	// metric "temp", 1 event/s, sine between 15 and 25.
	Metrics []MetricSpec `mapstructure:"metrics"`
	// Clock is the device clock model.
	Clock ClockSpec `mapstructure:"clock"`
	// Link is the network model.
	Link LinkSpec `mapstructure:"link"`
	// Crash restarts the agent: its uplink ends and a new one opens on the
	// same stream after the downtime (the shared store stays open).
	Crash CrashSpec `mapstructure:"crash"`
	// Preload is event history appended to each device's buffer before
	// its uplink starts, as if the device had been offline that long
	// (stamped as an NTP-synced agent would have stamped it). 0: none.
	// Not scaled: it is event time.
	Preload time.Duration `mapstructure:"preload"`
	// Unguarded captures this class's events at any time, on resolution
	// boundaries too (the scenario's BoundaryGuard does not apply): for
	// devices whose clocks are right, which the agent leaves uncorrected
	// so their windows are exact at the boundaries.
	Unguarded bool `mapstructure:"unguarded"`
}

// MetricSpec is one metric a device produces.
type MetricSpec struct {
	// Name is the metric name. Required.
	Name string `mapstructure:"name"`
	// Rate is events per second per device (real time). Default 1;
	// 0.001..1000.
	Rate float64 `mapstructure:"rate"`
	// Shape is how values evolve: sine, walk, uniform, constant or
	// counter. Default sine.
	Shape string `mapstructure:"shape"`
	// Min and Max bound the values (counter: Max is the step). Defaults 0
	// and 100.
	Min float64 `mapstructure:"min"`
	Max float64 `mapstructure:"max"`
	// Period is the sine period. Default 10m.
	Period time.Duration `mapstructure:"period"`
}

// Value shapes of MetricSpec.Shape.
const (
	ShapeSine     = "sine"
	ShapeWalk     = "walk"
	ShapeUniform  = "uniform"
	ShapeConstant = "constant"
	ShapeCounter  = "counter"
)

// Time sources of ClockSpec.TimeSource.
const (
	// TimeNTP: an NTP server that tells the true time (simulated in
	// process through clocksync's Dialer hook), reachable while the link is up.
	TimeNTP = "ntp"
	// TimeHub: the hub's time service over a second MQTT connection.
	TimeHub = "hub"
	// TimeNone: no source; events go UNTRUSTED and the hub applies its
	// own estimate.
	TimeNone = "none"
)

// ClockSpec is a device clock model. Each device draws its own offset and
// drift uniformly from [-Offset, Offset] and [-DriftPPM, DriftPPM].
type ClockSpec struct {
	// Offset bounds the initial error of the device wall clock. Default 0.
	Offset time.Duration `mapstructure:"offset"`
	// DriftPPM bounds the oscillator error, parts per million. Default 0;
	// at most 500.
	DriftPPM float64 `mapstructure:"drift_ppm"`
	// Steps are wall-clock steps (someone set the clock) at scenario times.
	Steps []ClockStep `mapstructure:"steps"`
	// PowerLoss are simulated power losses: the agent stops, the device
	// reboots (new boot id, monotonic clock from zero) with its wall clock
	// reset to 1970, and the agent starts again after Down.
	PowerLoss []Outage `mapstructure:"power_loss"`
	// TimeSource is ntp, hub or none. Default ntp.
	TimeSource string `mapstructure:"time_source"`
	// WaitSync delays a device's first events (after boot) until its clock
	// is trusted, at most this long (real time). 0 produces at once.
	WaitSync time.Duration `mapstructure:"wait_sync"`
}

// ClockStep is a wall-clock step of By at scenario time At.
type ClockStep struct {
	At time.Duration `mapstructure:"at"`
	By time.Duration `mapstructure:"by"`
}

// Outage is a time span: from At (scenario time since the start) for For.
// Down is used by power losses instead of For.
type Outage struct {
	At   time.Duration `mapstructure:"at"`
	For  time.Duration `mapstructure:"for"`
	Down time.Duration `mapstructure:"down"`
}

// LinkSpec is a device's network model.
type LinkSpec struct {
	// Outages are scheduled outages, the same for every device of the
	// class, each shifted by a random 0..Spread per device.
	Outages []Outage `mapstructure:"outages"`
	// Spread desynchronises scheduled outages across devices. Default 0.
	Spread time.Duration `mapstructure:"spread"`
	// Random outages: on average one every Every per device, lasting
	// uniformly MinFor..MaxFor. Every 0: none.
	Random RandomOutages `mapstructure:"random"`
	// Latency is the one-way delay added to every chunk of bytes in each
	// direction between the device and the broker (real time, not
	// scaled). Default 0; at most 1m.
	Latency time.Duration `mapstructure:"latency"`
	// Jitter adds a uniformly random 0..Jitter to each chunk's delay,
	// order kept. Default 0; at most 1m.
	Jitter time.Duration `mapstructure:"jitter"`
	// Silent makes outages drop the link without closing it, as a
	// cellular modem losing its bearer does: bytes stop flowing both ways
	// and the agent notices only through its MQTT keep-alive. False: an
	// outage closes the connection at once.
	Silent bool `mapstructure:"silent"`
}

// RandomOutages configure a Poisson process of outages.
type RandomOutages struct {
	Every  time.Duration `mapstructure:"every"`
	MinFor time.Duration `mapstructure:"min_for"`
	MaxFor time.Duration `mapstructure:"max_for"`
}

// CrashSpec configures agent crashes: on average one every Every per
// device, the agent down for Down. Every 0: none.
//
// A crash is abrupt unless Graceful is set, as a panic, an OOM kill or a
// SIGKILL is: the agent's broker connection is dropped without an MQTT
// DISCONNECT or offline status, so the broker publishes the agent's last
// will, and the batches in flight are forgotten with the process; the
// restarted agent resends from its durable buffer what the hub had not
// acknowledged into it.
type CrashSpec struct {
	Every time.Duration `mapstructure:"every"`
	Down  time.Duration `mapstructure:"down"`
	// Graceful makes the agent stop cleanly instead, as a supervisor's
	// restart (SIGTERM) does: the uplink publishes its offline status and
	// disconnects. Default false: a crash.
	Graceful bool `mapstructure:"graceful"`
}

// UplinkTuning is the subset of uplink.Options a scenario may set. Zero
// values keep the uplink's defaults, except BackoffMin/BackoffMax whose
// defaults here (200ms, 10s) suit compressed time and PollInterval (1s:
// the buffer wakes the uplink when there is something to send).
type UplinkTuning struct {
	MaxBatchEvents int           `mapstructure:"max_batch_events"`
	Linger         time.Duration `mapstructure:"linger"`
	Window         int           `mapstructure:"window"`
	AckTimeout     time.Duration `mapstructure:"ack_timeout"`
	PollInterval   time.Duration `mapstructure:"poll_interval"`
	BackoffMin     time.Duration `mapstructure:"backoff_min"`
	BackoffMax     time.Duration `mapstructure:"backoff_max"`
	KeepAlive      time.Duration `mapstructure:"keep_alive"`
	// AckQoS is the QoS of the ack subscriptions, 0 or 1; nil keeps the
	// uplink's default, 1.
	AckQoS *int `mapstructure:"ack_qos"`
	// Compression is the batch frames' codec: columns (default), zstd,
	// s2 or none.
	Compression string `mapstructure:"compression"`
}

// BufferTuning is the subset of buffer.Options a scenario may set. Zero
// values keep the buffer's defaults.
type BufferTuning struct {
	// SyncInterval is the buffer's group-commit period (the agent's
	// sync-interval): records become readable, and so sent, only after the
	// sync that makes them durable. All simulated devices share one store,
	// so each sync releases every device's records of that period at once,
	// where real devices with timers of their own would not be in step;
	// see the package documentation. Default: the buffer's (100ms).
	SyncInterval time.Duration `mapstructure:"sync_interval"`
}

// VerifySpec says what the verifier checks.
type VerifySpec struct {
	// Windows are window specs as the hub's API takes them
	// (aggregate.ParseWindowSpec): tumbling and hopping, multiples of
	// Resolution. Default tumbling:<Resolution>, tumbling:1m, hopping:1m/<Resolution>.
	Windows []string `mapstructure:"windows"`
	// TimeSampleEvery keeps the true time of every Nth event for the
	// event-time error check against GET /v1/events. Default 10.
	TimeSampleEvery int `mapstructure:"time_sample_every"`
}

// EnsureDefaults fills zero fields with their defaults.
func (s *Scenario) EnsureDefaults() {
	if s.Name == "" {
		s.Name = "custom"
	}
	def(&s.Devices, 100)
	def(&s.DevicePrefix, "sim")
	def(&s.Duration, time.Minute)
	def(&s.TimeScale, 1)
	def(&s.Seed, 1)
	def(&s.Resolution, 10*time.Second)
	def(&s.BoundaryGuard, 100*time.Millisecond)
	def(&s.DrainTimeout, 2*time.Minute)
	if len(s.Classes) == 0 {
		s.Classes = []DeviceClass{{}}
	}
	for i := range s.Classes {
		c := &s.Classes[i]
		def(&c.Name, fmt.Sprintf("class%d", i))
		def(&c.Share, 1)
		def(&c.Clock.TimeSource, TimeNTP)
		if len(c.Metrics) == 0 {
			c.Metrics = []MetricSpec{{Name: "temp", Min: 15, Max: 25}}
		}
		for j := range c.Metrics {
			m := &c.Metrics[j]
			def(&m.Rate, 1)
			def(&m.Shape, ShapeSine)
			if m.Min == 0 && m.Max == 0 {
				m.Max = 100
			}
			def(&m.Period, 10*time.Minute)
		}
	}
	// The buffer wakes an uplink when records become readable, so the
	// poll is only a fallback; at the uplink's 100 ms, 10,000 send loops
	// would wake 100,000 times a second for nothing.
	def(&s.Uplink.PollInterval, time.Second)
	def(&s.Uplink.BackoffMin, 200*time.Millisecond)
	def(&s.Uplink.BackoffMax, 10*time.Second)
	if len(s.Verify.Windows) == 0 {
		r := s.Resolution.String()
		s.Verify.Windows = []string{"tumbling:" + r, "tumbling:1m0s", "hopping:1m0s/" + r}
	}
	def(&s.Verify.TimeSampleEvery, 10)
}

func def[T comparable](p *T, d T) {
	var zero T
	if *p == zero {
		*p = d
	}
}

// Validate names the first field that is out of range.
func (s *Scenario) Validate() error {
	var errs []error
	bad := func(field, f string, a ...any) {
		errs = append(errs, fmt.Errorf("scenario %s: %s", field, fmt.Sprintf(f, a...)))
	}
	if s.Devices < 1 || s.Devices > 1_000_000 {
		bad("devices", "%d: want 1..1000000", s.Devices)
	}
	if s.DevicePrefix == "" || len(s.DevicePrefix) > 64 || strings.ContainsAny(s.DevicePrefix, "/+# ") {
		bad("device_prefix", "%q: want 1..64 characters without / + # or space", s.DevicePrefix)
	}
	if s.Duration <= 0 {
		bad("duration", "%v: want positive", s.Duration)
	}
	if s.TimeScale < 1 || math.IsInf(s.TimeScale, 0) || math.IsNaN(s.TimeScale) {
		bad("time_scale", "%v: want at least 1", s.TimeScale)
	}
	if s.Resolution < time.Second || s.Resolution%time.Millisecond != 0 {
		bad("resolution", "%v: want a whole number of milliseconds, at least 1s", s.Resolution)
	}
	if s.BoundaryGuard < 0 || s.BoundaryGuard >= s.Resolution/4 {
		bad("boundary_guard", "%v: want 0..resolution/4", s.BoundaryGuard)
	}
	if s.DrainTimeout <= 0 {
		bad("drain_timeout", "%v: want positive", s.DrainTimeout)
	}
	if s.RampUp < 0 || s.RampUp >= s.Duration {
		bad("ramp_up", "%v: want 0..duration", s.RampUp)
	}
	if s.Warmup < 0 || s.RampUp+s.Warmup >= s.Duration {
		bad("warmup", "%v: want 0..duration-ramp_up", s.Warmup)
	}
	if s.FleetOutage.At < 0 || s.FleetOutage.For < 0 {
		bad("fleet_outage", "negative at or for")
	}
	switch h := s.HubOutage; {
	case h.Down != 0:
		bad("hub_outage.down", "%v: not used by a hub outage; say for", h.Down)
	case h.At < 0 || h.For < 0:
		bad("hub_outage", "at %v for %v: want at >= 0 and for >= 0", h.At, h.For)
	case h.For > 0 && h.At >= s.Duration:
		bad("hub_outage.at", "%v: want before the end of duration (%v)", h.At, s.Duration)
	}
	for i, c := range s.Classes {
		errs = append(errs, c.validate(fmt.Sprintf("classes[%d]", i)))
	}
	for i, w := range s.Verify.Windows {
		if _, err := ParseWindow(w, s.Resolution); err != nil {
			bad(fmt.Sprintf("verify.windows[%d]", i), "%v", err)
		}
	}
	if s.Verify.TimeSampleEvery < 1 {
		bad("verify.time_sample_every", "%d: want at least 1", s.Verify.TimeSampleEvery)
	}
	if s.Uplink.BackoffMin <= 0 || s.Uplink.BackoffMax < s.Uplink.BackoffMin {
		bad("uplink.backoff_min/backoff_max", "%v/%v: want 0 < min <= max", s.Uplink.BackoffMin, s.Uplink.BackoffMax)
	}
	if q := s.Uplink.AckQoS; q != nil && *q != 0 && *q != 1 {
		bad("uplink.ack_qos", "%d: want 0 or 1", *q)
	}
	if c := s.Uplink.Compression; c != "" {
		if _, err := wire.ParseCodec(c); err != nil {
			bad("uplink.compression", "%v", err)
		}
	}
	if d := s.Buffer.SyncInterval; d != 0 && (d < time.Millisecond || d > time.Minute) {
		bad("buffer.sync_interval", "%v: want 1ms..1m", d)
	}
	return errors.Join(errs...)
}

func (c *DeviceClass) validate(at string) error {
	var errs []error
	bad := func(field, f string, a ...any) {
		errs = append(errs, fmt.Errorf("scenario %s.%s: %s", at, field, fmt.Sprintf(f, a...)))
	}
	if c.Share <= 0 {
		bad("share", "%v: want positive", c.Share)
	}
	seen := map[string]bool{}
	for j, m := range c.Metrics {
		f := fmt.Sprintf("metrics[%d]", j)
		if m.Name == "" || len(m.Name) > 128 || seen[m.Name] {
			bad(f+".name", "%q: want a unique name of 1..128 bytes", m.Name)
		}
		seen[m.Name] = true
		if m.Rate < 0.001 || m.Rate > 1000 {
			bad(f+".rate", "%v: want 0.001..1000 events/s", m.Rate)
		}
		switch m.Shape {
		case ShapeSine, ShapeWalk, ShapeUniform, ShapeConstant, ShapeCounter:
		default:
			bad(f+".shape", "%q: want sine, walk, uniform, constant or counter", m.Shape)
		}
		if m.Max < m.Min {
			bad(f+".max", "%v is below min %v", m.Max, m.Min)
		}
		if m.Period <= 0 {
			bad(f+".period", "%v: want positive", m.Period)
		}
	}
	if c.Clock.Offset < 0 {
		bad("clock.offset", "%v: want non-negative (a bound)", c.Clock.Offset)
	}
	if c.Clock.DriftPPM < 0 || c.Clock.DriftPPM > 500 {
		bad("clock.drift_ppm", "%v: want 0..500", c.Clock.DriftPPM)
	}
	switch c.Clock.TimeSource {
	case TimeNTP, TimeHub, TimeNone:
	default:
		bad("clock.time_source", "%q: want ntp, hub or none", c.Clock.TimeSource)
	}
	for k, p := range c.Clock.PowerLoss {
		if p.At < 0 || p.Down <= 0 {
			bad(fmt.Sprintf("clock.power_loss[%d]", k), "at %v down %v: want at >= 0 and down > 0", p.At, p.Down)
		}
	}
	for k, o := range c.Link.Outages {
		if o.At < 0 || o.For <= 0 {
			bad(fmt.Sprintf("link.outages[%d]", k), "at %v for %v: want at >= 0 and for > 0", o.At, o.For)
		}
	}
	if r := c.Link.Random; r.Every < 0 || (r.Every > 0 && (r.MinFor <= 0 || r.MaxFor < r.MinFor)) {
		bad("link.random", "every %v min_for %v max_for %v: want 0 < min_for <= max_for", r.Every, r.MinFor, r.MaxFor)
	}
	if c.Link.Latency < 0 || c.Link.Latency > time.Minute {
		bad("link.latency", "%v: want 0..1m", c.Link.Latency)
	}
	if c.Link.Jitter < 0 || c.Link.Jitter > time.Minute {
		bad("link.jitter", "%v: want 0..1m", c.Link.Jitter)
	}
	if c.Crash.Every < 0 || (c.Crash.Every > 0 && c.Crash.Down <= 0) {
		bad("crash", "every %v down %v: want down > 0 when every is set", c.Crash.Every, c.Crash.Down)
	}
	if c.Preload < 0 || c.Preload > 7*24*time.Hour {
		bad("preload", "%v: want 0..168h", c.Preload)
	}
	return errors.Join(errs...)
}

// scaled converts a scenario duration to real time.
func (s *Scenario) scaled(d time.Duration) time.Duration {
	return time.Duration(float64(d) / s.TimeScale)
}
