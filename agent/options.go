package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"edgeflow/buffer"
	"edgeflow/clocksync"
	"edgeflow/uplink"
	"edgeflow/wire"
)

// Off, as Options.HTTPAddr, disables the HTTP server.
const Off = "off"

// Options configure an Agent. Zero values take the defaults noted per field.
type Options struct {
	// DeviceID names the device to the hub (topics, batches, stream name).
	// Required; wire.ValidateDeviceID's rules.
	DeviceID string
	// DataDir is the buffer's Badger directory. Required.
	DataDir string
	// HTTPAddr is the local ingest and status address. Default
	// 127.0.0.1:8181; Off disables it.
	HTTPAddr string
	// UDPAddr is the InfluxDB line protocol listener. Default "" (off).
	UDPAddr string
	// MaxBodyBytes bounds one POST /v1/events body. Default 1 MiB;
	// 1 KiB..64 MiB.
	MaxBodyBytes int64
	// MaxRequestEvents bounds the events of one request. Default 10,000;
	// 1..100,000.
	MaxRequestEvents int
	// HTTPToken, when set, is the bearer token every HTTP request but
	// /healthz must carry ("Authorization: Bearer <token>"): for an API
	// that listens beyond loopback. Default "" (open).
	HTTPToken string
	// HTTPTLSCertFile and HTTPTLSKeyFile serve the HTTP API over TLS. Both
	// or neither. Default "" (plain HTTP).
	HTTPTLSCertFile, HTTPTLSKeyFile string

	// Buffer configures the store. Its Logger and Registerer default to
	// the agent's.
	Buffer buffer.Options
	// Stream bounds the device's stream (MaxBytes, MaxAge, Full).
	Stream buffer.StreamOptions
	// Uplink configures delivery: Brokers, credentials, TLS, batching.
	// DeviceID, Retime, Clock, Version, Logger and Registerer are set by
	// the agent.
	Uplink uplink.Options

	// NTPServers are asked for the time; empty disables NTP.
	NTPServers []string
	// TimeHub asks the hub for the time over MQTT when NTP does not answer
	// (a second MQTT connection; see the package documentation).
	TimeHub bool
	// TrustDeviceClock stamps events with method DEVICE when there is no
	// time source (no NTP servers, TimeHub off): for devices whose clock is
	// disciplined otherwise (GPS). Without it such events are UNTRUSTED.
	TrustDeviceClock bool
	// Clock tunes clocksync (poll intervals, bounds). Servers, Hub, Logger
	// and Registerer are set by the agent.
	Clock clocksync.Options

	// FirstSyncWait is how long Run holds the first upload for the
	// clock's first trusted estimate (restored or from a time exchange),
	// so the first batch is stamped or repaired by the agent rather than
	// left to the hub's coarser estimate; ingest is served meanwhile.
	// Default 2 s; at most 1 min; NoFirstSyncWait uploads at once. Only
	// with a time source.
	FirstSyncWait time.Duration
	// DrainTimeout is how long shutdown lets a connected uplink send what
	// the buffer holds before it disconnects. Default 5 s; NoDrain skips it.
	DrainTimeout time.Duration
	// LogEvery rate-limits repeated warnings (bad UDP lines). Default 10 s.
	LogEvery time.Duration
	// Version is reported in /v1/status and the uplink's status messages.
	Version string
	// Now is the device wall clock. Default time.Now.
	Now func() time.Time
	// Logger receives the agent's logs. Default slog.Default().
	Logger *slog.Logger
	// Registerer receives every metric of the agent, buffer, uplink and
	// clock, and Gatherer serves them on /metrics. Default: a new registry
	// for both.
	Registerer prometheus.Registerer
	Gatherer   prometheus.Gatherer
}

// ClockStateFile is the file in DataDir that keeps the clock's estimate
// across restarts of the agent in the same boot (clocksync.Options.StatePath).
const ClockStateFile = "clock-state.json"

// NoFirstSyncWait, as Options.FirstSyncWait, uploads without waiting for
// the clock.
const NoFirstSyncWait = time.Duration(-1)

// NoDrain, as Options.DrainTimeout, disconnects at once on shutdown.
const NoDrain = time.Duration(-1)

// EnsureDefaults fills zero fields with their defaults.
func (o *Options) EnsureDefaults() {
	if o.HTTPAddr == "" {
		o.HTTPAddr = "127.0.0.1:8181"
	}
	if o.MaxBodyBytes == 0 {
		o.MaxBodyBytes = 1 << 20
	}
	if o.MaxRequestEvents == 0 {
		o.MaxRequestEvents = 10_000
	}
	if o.FirstSyncWait == 0 {
		o.FirstSyncWait = 2 * time.Second
	}
	if o.DrainTimeout == 0 {
		o.DrainTimeout = 5 * time.Second
	}
	if o.LogEvery == 0 {
		o.LogEvery = 10 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Registerer == nil && o.Gatherer == nil {
		reg := prometheus.NewRegistry()
		o.Registerer, o.Gatherer = reg, reg
	}
	if o.Buffer.Logger == nil {
		o.Buffer.Logger = o.Logger
	}
	if o.Buffer.Registerer == nil {
		o.Buffer.Registerer = o.Registerer
	}
	o.Buffer.EnsureDefaults()
	o.Stream.EnsureDefaults()
	o.Uplink.DeviceID, o.Uplink.Version = o.DeviceID, o.Version
	if o.Uplink.Logger == nil {
		o.Uplink.Logger = o.Logger
	}
	if o.Uplink.Registerer == nil {
		o.Uplink.Registerer = o.Registerer
	}
	o.Uplink.EnsureDefaults()
}

// Validate names the first field that is out of range, including those of
// the Buffer, Stream and Uplink options (their errors name their fields).
func (o *Options) Validate() error {
	if err := wire.ValidateDeviceID(o.DeviceID); err != nil {
		return fmt.Errorf("agent: device id: %w", err)
	}
	if o.DataDir == "" {
		return errors.New("agent: data dir: required")
	}
	if o.HTTPAddr != Off {
		if _, _, err := net.SplitHostPort(o.HTTPAddr); err != nil {
			return fmt.Errorf("agent: http addr %q: want host:port or %q: %v", o.HTTPAddr, Off, err)
		}
	}
	if o.UDPAddr != "" && o.UDPAddr != Off {
		if _, _, err := net.SplitHostPort(o.UDPAddr); err != nil {
			return fmt.Errorf("agent: udp addr %q: want host:port or empty: %v", o.UDPAddr, err)
		}
	}
	if o.MaxBodyBytes < 1<<10 || o.MaxBodyBytes > 64<<20 {
		return fmt.Errorf("agent: max body bytes %d: want 1 KiB..64 MiB", o.MaxBodyBytes)
	}
	if o.MaxRequestEvents < 1 || o.MaxRequestEvents > 100_000 {
		return fmt.Errorf("agent: max request events %d: want 1..100000", o.MaxRequestEvents)
	}
	if (o.HTTPTLSCertFile == "") != (o.HTTPTLSKeyFile == "") {
		return errors.New("agent: http tls: cert and key files go together")
	}
	if o.HTTPToken != "" && (len(o.HTTPToken) < 16 || strings.ContainsAny(o.HTTPToken, " \t\r\n")) {
		return errors.New("agent: http token: want at least 16 characters without white space")
	}
	for i, s := range o.NTPServers {
		if s == "" {
			return fmt.Errorf("agent: ntp servers[%d] is empty", i)
		}
	}
	if o.FirstSyncWait != NoFirstSyncWait && (o.FirstSyncWait < 0 || o.FirstSyncWait > time.Minute) {
		return fmt.Errorf("agent: first sync wait %v: want NoFirstSyncWait or up to 1m", o.FirstSyncWait)
	}
	if o.DrainTimeout != NoDrain && (o.DrainTimeout < 0 || o.DrainTimeout > 10*time.Minute) {
		return fmt.Errorf("agent: drain timeout %v: want NoDrain or up to 10m", o.DrainTimeout)
	}
	if o.LogEvery <= 0 {
		return fmt.Errorf("agent: log every %v: want a positive duration", o.LogEvery)
	}
	if err := o.Buffer.Validate(); err != nil {
		return err
	}
	if err := o.Stream.Validate(); err != nil {
		return err
	}
	return o.Uplink.Validate()
}

// clockOptions returns the clocksync options, or ok false when there is no
// time source.
func (o *Options) clockOptions(hub clocksync.HubExchanger) (co clocksync.Options, ok bool) {
	co = o.Clock
	co.Servers = o.NTPServers
	if hub != nil {
		co.Hub = hub
	}
	if co.Logger == nil {
		co.Logger = o.Logger
	}
	if co.Registerer == nil {
		co.Registerer = o.Registerer
	}
	if co.Wall == nil {
		co.Wall = o.Now
	}
	if co.StatePath == "" {
		co.StatePath = filepath.Join(o.DataDir, ClockStateFile)
	}
	return co, len(co.Servers) > 0 || co.Hub != nil
}
