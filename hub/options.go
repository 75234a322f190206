package hub

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"edgeflow/aggregate"
	"edgeflow/hub/alertout"
	"edgeflow/hub/broker"
	"edgeflow/hub/cluster"
	"edgeflow/hub/membudget"
	"edgeflow/hub/rules"
	"edgeflow/hub/sinks"
	"edgeflow/internal/confval"
	"edgeflow/wire"
)

// Options configure a Server. Zero fields take the defaults that
// EnsureDefaults documents; Validate names the first bad field.
type Options struct {
	// DataDir holds the hub's Badger directory (DataDir/wal). Required.
	DataDir string
	// HTTPAddr is the address of the HTTP API; "off" disables it. Default ":8080".
	HTTPAddr string
	// MQTTListen is the embedded broker's TCP listener. Default ":1883";
	// port 0 picks a free port (see Server.BrokerAddr).
	MQTTListen string
	// MQTTURL selects an external broker (tcp://host:1883, ssl://...) instead
	// of the embedded one. Default "" (embedded).
	MQTTURL string
	// ClientID is the hub's MQTT client id on an external broker; it must be
	// stable so the broker keeps the hub's session (CleanSession=false)
	// while it restarts. Default "edgeflow-hubd".
	ClientID string
	// Username and Password authenticate to an external broker. Default none.
	Username, Password string
	// MQTTCAFile is a PEM bundle of the CAs that sign an external broker's
	// certificate. Setting it (or any MQTT*File or MQTTServerName) turns
	// TLS on for MQTTURL. Default "" (the system roots, when TLS is on).
	MQTTCAFile string
	// MQTTCertFile and MQTTKeyFile are the hub's PEM client certificate and
	// key for mutual TLS with an external broker. Both or neither.
	MQTTCertFile, MQTTKeyFile string
	// MQTTServerName overrides the name checked against an external
	// broker's certificate. Default "" (the host of MQTTURL).
	MQTTServerName string
	// Group, when set, subscribes to batches through the shared subscription
	// $share/{Group}/... on an external broker. Default "" (plain).
	Group string
	// NATS, with URLs set, runs the hub in cluster mode: batches come from
	// a NATS JetStream stream and devices connect to the NATS servers'
	// MQTT listeners (package cluster; cluster_options.go checks what it
	// excludes). Default off.
	NATS cluster.Options
	// HubID names this hub among the hubs sharing the stream's partitions
	// (cluster mode): its partition leases and heartbeat carry it. 1..64
	// letters, digits, '-' or '_'. Default: an id generated once and kept
	// in DataDir/hub-id, so a restart keeps it (hubid.go).
	HubID string
	// HTTPAdvertiseURL is the base URL the other hubs of a cluster reach
	// this hub's API at (cluster mode), e.g. http://hub-a:8080. Default:
	// derived from the address the API listens on (clusterview.AdvertiseURL).
	HTTPAdvertiseURL string

	// MQTTAuthFile is a credentials file ("device-id:bcrypt-hash" lines,
	// see Credentials and `hubd passwd`) for the embedded broker: a client
	// that sends a username must match it, and is then restricted to its
	// device's topics (BrokerSecurity). Default "" (no passwords).
	MQTTAuthFile string
	// MQTTTLSCertFile and MQTTTLSKeyFile make the embedded broker's
	// listener TLS. Both or neither. Default "" (plain TCP).
	MQTTTLSCertFile, MQTTTLSKeyFile string
	// MQTTTLSClientCAFile verifies device certificates with these CAs; a
	// device's certificate CN is its device id. Needs MQTTTLSCertFile.
	// Default "" (no client certificates).
	MQTTTLSClientCAFile string
	// MQTTDenyAnonymous refuses clients without credentials (a password or
	// a client certificate) on the embedded broker. Production sets it;
	// the default, false, is the quick start's open broker.
	MQTTDenyAnonymous bool
	// MQTTClientQueue bounds the messages the embedded broker holds for
	// one client while its connection is busy; beyond it the broker drops
	// the client's messages and counts them
	// (edgeflow_hub_broker_dropped_messages_total). Each slot costs 8 bytes
	// per connection whether used or not, and the garbage collector scans
	// them all: the broker library's default, 8192, made 64 KiB of each
	// device's connection, two thirds of a 10,000-device hub's heap. A
	// device has at most its uplink window (at most 1024) of acks queued.
	// Default 1024, as Mosquitto's max_queued_messages (1000).
	MQTTClientQueue int
	// MQTTMaxConnsPerDevice bounds the open connections of one verified
	// device on the embedded broker. Default 4 (an agent uses 2); -1: no
	// bound.
	MQTTMaxConnsPerDevice int
	// MQTTMaxRetainedBytes bounds a retained message's payload on the
	// embedded broker, where only a device's status is retained; a retained
	// publish or will beyond it, or on another topic, is delivered as a
	// plain message and not kept. Default DefaultMaxRetainedBytes (4 KiB).
	MQTTMaxRetainedBytes int
	// MQTTAuthThrottle slows down clients and sources that fail the
	// embedded broker's password check; zero fields take its defaults.
	MQTTAuthThrottle broker.AuthThrottle
	// MaxEventsPerSecond is each device's sustained event rate; a batch
	// that arrives while the device's token bucket is in debt is not
	// applied and answered RETRY_LATER (reason rate_limited, with the time
	// until the bucket is out of debt); the agent keeps it and sends it
	// again later, so nothing is lost. Default 0: no limit.
	MaxEventsPerSecond float64
	// EventsBurst is the bucket's size in events (a device may send this
	// many at once after being idle). Default MaxEventsPerSecond (one
	// second's worth).
	EventsBurst float64

	// HTTPTLSCertFile and HTTPTLSKeyFile serve the HTTP API over TLS. Both
	// or neither. Default "" (plain HTTP).
	HTTPTLSCertFile, HTTPTLSKeyFile string
	// HTTPReadToken, when set, is the bearer token every HTTP request but
	// /healthz and /readyz must carry ("Authorization: Bearer <token>").
	// The API has no endpoint that changes state, so there is no admin
	// token. Default "" (open).
	HTTPReadToken string
	// HTTPWriteToken, when set, is the bearer token that attribute writes
	// (PUT /v1/devices/{id}/attributes, POST /v1/attributes/bulk) must
	// carry; it is distinct from HTTPReadToken, and without it the hub
	// refuses attribute writes (403). Flag http-write-token (or
	// http-write-token-file); default empty.
	HTTPWriteToken string
	// HTTPReadTimeout bounds reading a request, HTTPWriteTimeout writing a
	// response (GET /v1/stream is exempt: it streams). Defaults 30s, 2m.
	HTTPReadTimeout, HTTPWriteTimeout time.Duration
	// HTTPMaxRequestBytes bounds a request body. Default 64 KiB.
	HTTPMaxRequestBytes int64
	// HTTPMaxQueries bounds the expensive queries (GET /v1/aggregates,
	// /v1/events, /v1/partials) that run at once, so that a burst of them
	// leaves CPU and memory to ingest and /metrics; one that finds them
	// all taken waits up to HTTPQueryWait, then is answered 429 with
	// Retry-After. Default GOMAXPROCS/2, at least 1.
	HTTPMaxQueries int
	// HTTPQueryWait is how long a query waits for a slot. Default 1s.
	HTTPQueryWait time.Duration
	// HTTPQueryTimeout bounds one query's time: it is stopped (503) past
	// it, and when its client goes away. A query holds the engine's read
	// lock, which ingest waits for. Default 30s, at most HTTPWriteTimeout.
	HTTPQueryTimeout time.Duration
	// HTTPClusterWait bounds how long an answer of a hub in a cluster
	// waits for a partition that has no current owner before it answers
	// without it ("partial": true). Default 2s; at most 1m and
	// HTTPQueryTimeout. Unused by a single hub.
	HTTPClusterWait time.Duration

	// Limits bound what a batch may hold; zero fields take wire.DefaultLimits.
	Limits wire.Limits
	// MaxSeqAhead rejects a batch that starts more than this many sequence
	// numbers beyond anything its stream sent before (corrupt or hostile
	// agents). Default 1<<32.
	MaxSeqAhead uint64
	// MaxRangesPerStream bounds the disjoint applied ranges of one stream, so
	// an agent that sends every other batch cannot grow the dedup state
	// without bound. Default 4096.
	MaxRangesPerStream int
	// MaxStreamsPerDevice bounds the streams (agent buffer incarnations)
	// one device may hold open, so a device that sends random stream ids
	// cannot grow the hub's dedup state, registry and engine without
	// bound. A batch that would open one more is answered RETRY_LATER
	// (too_many_streams). Default 16, at most 65536.
	MaxStreamsPerDevice int
	// StreamIdleExpiry retires a stream that has had no accepted batch for
	// this long (hub clock), so a re-flashed device is not locked out by
	// its old streams. Default 168h, at least 1h.
	StreamIdleExpiry time.Duration

	// Workers is the number of decode workers. Default GOMAXPROCS.
	Workers int
	// QueueLen is the length of each worker's and the committer's queue, in
	// messages. Default 64.
	QueueLen int
	// MaxGroupBatches bounds the batches in one group commit. Default 512.
	MaxGroupBatches int
	// MaxGroupBytes bounds the payload bytes in one group commit. Default 32 MiB.
	MaxGroupBytes int
	// GroupCommitWait is how long after a group commit ends the next one
	// may start at the earliest, gathering what arrives meanwhile. Each
	// fsync costs the kernel a few hundred microseconds of CPU however
	// little it writes; committing as soon as a batch is there made one
	// per 5 – 7 batches under load, and waiting 2 ms made one per 18 – 23
	// and the end-to-end benchmark about a fifth faster at the same ack
	// latency. A batch that finds the log idle for longer is committed at
	// once, so a quiet hub adds nothing; a busy one adds at most this to a
	// batch's ack. Default 2ms; NoGroupCommitWait commits as soon as a
	// batch is there.
	GroupCommitWait time.Duration
	// PublishTimeout bounds the wait for an external broker's PUBACK of an
	// ack, and the connect and subscribe calls. Default 10s.
	PublishTimeout time.Duration
	// AcksAtLeastOnce publishes acks at QoS 1 instead of 0. An ack is
	// idempotent, the agent resends a batch whose ack does not come, and
	// it resends its whole unanswered window after every reconnect anyway,
	// so QoS 1 buys little: an ack to an agent that just went offline waits
	// in its broker session, where it answers a batch the agent is sending
	// again. It costs the agent's PUBACK and the broker's in-flight state
	// for every batch, which counts with many small batches (at 10,000
	// devices sending every second, about 50 ms more at the median; the
	// runs are in docs/FLEET-LATENCY.md). Default false (QoS 0).
	AcksAtLeastOnce bool
	// NoSync skips the fsync after each group (tests and benchmarks of the
	// rest of the path only: acks then no longer mean durable). Default false.
	NoSync bool

	// CheckpointInterval is the time between checkpoints. Default 1m; at
	// least 100ms.
	CheckpointInterval time.Duration
	// RetentionMaxAge is how long log entries are kept (by server time); an
	// entry is deleted only once a checkpoint covers it. Default 168h; at
	// least 1m and at least CheckpointInterval.
	RetentionMaxAge time.Duration
	// RetentionInterval is the time between retention passes. Default 5m;
	// at least 1s.
	RetentionInterval time.Duration
	// RecoverDamaged starts the hub when log entries cannot be read (a
	// truncated value log, flipped bytes): it starts from what is
	// readable and records the loss (gaps with reason store_damaged, a
	// metric, a log line). Default false: the hub stops and says which
	// positions, server times and devices the damage covers. A damaged
	// checkpoint needs no setting: the hub falls back to the previous one
	// or to a replay of the whole log when the log still holds it.
	RecoverDamaged bool
	// ShutdownTimeout bounds Run's shutdown (final writes, checkpoint,
	// closing the store) once ctx ends or the log fails; past it Run
	// returns an error without waiting further. What was acknowledged is
	// durable already; a restart replays the log after the last
	// checkpoint. Badger's close retries a failed memtable flush forever
	// (a data directory deleted under a running hub), so without a bound
	// a SIGTERM could hang. Default 30s; at least 1s.
	ShutdownTimeout time.Duration
	// RejectLogInterval bounds rejection log lines to one per interval (the
	// line says how many were suppressed). Default 1s.
	RejectLogInterval time.Duration

	// Memory holds the sizes derived from a memory budget
	// (membudget.Derive): Badger's, the apply lag's, and the defaults of
	// QueueLen, MaxGroupBytes, MaxGroupBatches, MQTTClientQueue and the
	// engine's caps when those are zero. The zero value keeps every
	// component's own default.
	Memory membudget.Sizes

	// Consumers receive every applied batch in log order (see Consumer).
	Consumers []Consumer
	// Aggregate configures the event-time engine the hub feeds (as the
	// consumer named "aggregate") and serves over /v1/aggregates,
	// /v1/stream and /v1/late; its evicted partials live in the hub's
	// Badger directory. Nil runs the hub without one. Default nil.
	Aggregate *aggregate.Options
	// Rules are the standing rules the hub evaluates after the engine
	// (docs/RULES.md); their state is the checkpoint's "rules" consumer.
	// They need Aggregate. Default none.
	Rules []rules.Rule
	// Sinks are the downstream targets (package sinks) the hub keeps in
	// sync with its log, each from its own position stored in the
	// target. They start once the state is recovered; a table that does
	// not match stops Start. Default none.
	Sinks []sinks.Config
	// AlertOutputs receive every alert change (package alertout: webhook,
	// MQTT on the hub's broker), each from its own position stored in the
	// hub's store. They need Rules. Default none.
	AlertOutputs []alertout.Config
	// SinkMaxLag bounds, in log entries, how far behind the older retained
	// checkpoint a sink may be and still hold log retention back (entries
	// younger than RetentionMaxAge are kept anyway). A sink further behind
	// stops holding it, so a target down for long cannot fill the disk;
	// once retention deletes entries the sink had not written, the sink
	// is marked broken with the gap and stops there. Default
	// DefaultSinkMaxLag.
	SinkMaxLag uint64
	// TickInterval is the time between logged ticks that move the engine's
	// processing time while no batch arrives (idle streams are released,
	// windows become final). Only used with Aggregate. Default 1s; at
	// least 10ms.
	TickInterval time.Duration
	// StreamHeartbeat is the time between ": ping" comments on
	// GET /v1/stream, so proxies keep idle streams open. Default 15s.
	StreamHeartbeat time.Duration
	// ClockEstimator is the hub's own per-device clock estimate from batch
	// timing, used for events the agent could not correct. Default a
	// DeviceClocks with its default options.
	ClockEstimator ClockEstimator
	// TimeService answers time requests. Default a TimeService that
	// answers through Server.Publish.
	TimeService TimeRequestHandler

	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Logger receives the hub's logs. Default slog.Default().
	Logger *slog.Logger
	// Registerer receives the hub's metrics. Default a new registry.
	Registerer prometheus.Registerer
	// Gatherer serves /metrics. Default Registerer if it is a Gatherer, else
	// prometheus.DefaultGatherer.
	Gatherer prometheus.Gatherer
}

// NoGroupCommitWait as Options.GroupCommitWait commits each group as soon
// as a batch is there.
const NoGroupCommitWait time.Duration = -1

// maxGroupCommitWait bounds Options.GroupCommitWait: beyond it the wait is
// a latency no fsync saving pays for.
const maxGroupCommitWait = 100 * time.Millisecond

// DefaultSinkMaxLag is Options.SinkMaxLag's default: ten million log
// entries past the older retained checkpoint. Retention keeps every entry
// younger than RetentionMaxAge regardless, so the bound only limits what a
// sink stuck for longer than that keeps on disk: at ~1 KiB per entry
// (a batch of some tens of events) about 10 GiB.
const DefaultSinkMaxLag = 10_000_000

// The lower bounds of the periodic work's intervals. A duration read as
// nanoseconds (a number written without a unit) falls below every one of
// them, and so does any value at which the work would run back to back.
const (
	// minCheckpointInterval: a checkpoint serialises the whole state;
	// more often, a hub would do little else.
	minCheckpointInterval = 100 * time.Millisecond
	// minRetentionMaxAge: the log backs GET /v1/events and hubd rebuild;
	// a shorter retention empties it as soon as a checkpoint covers it.
	minRetentionMaxAge = time.Minute
	// minRetentionInterval: each pass scans the log's oldest entries.
	minRetentionInterval = time.Second
	// minShutdownTimeout: a shutdown writes a checkpoint and closes Badger.
	minShutdownTimeout = time.Second
	// minTickInterval: each tick is a logged entry and an engine pass.
	minTickInterval = 10 * time.Millisecond
	// minStreamIdleExpiry: a shorter expiry would retire the stream of an
	// agent that is merely offline for a while, and a redelivery of one of
	// its batches after that would be applied again.
	minStreamIdleExpiry = time.Hour
	// maxStreamsPerDevice bounds MaxStreamsPerDevice.
	maxStreamsPerDevice = 65536
)

// HTTPOff as Options.HTTPAddr disables the HTTP API.
const HTTPOff = "off"

// EnsureDefaults fills zero fields with their defaults.
func (o *Options) EnsureDefaults() {
	o.applyMemory()
	setDefault(&o.HTTPAddr, ":8080")
	setDefault(&o.MQTTListen, ":1883")
	setDefault(&o.ClientID, "edgeflow-hubd")
	o.Limits = limitsWithDefaults(o.Limits)
	setDefault(&o.MaxSeqAhead, 1<<32)
	setDefault(&o.MaxRangesPerStream, 4096)
	setDefault(&o.MaxStreamsPerDevice, 16)
	setDefault(&o.StreamIdleExpiry, 168*time.Hour)
	setDefault(&o.Workers, runtime.GOMAXPROCS(0))
	setDefault(&o.QueueLen, 64)
	setDefault(&o.MaxGroupBatches, 512)
	setDefault(&o.MaxGroupBytes, 32<<20)
	setDefault(&o.GroupCommitWait, 2*time.Millisecond)
	setDefault(&o.PublishTimeout, 10*time.Second)
	setDefault(&o.CheckpointInterval, time.Minute)
	setDefault(&o.RetentionMaxAge, 7*24*time.Hour)
	setDefault(&o.SinkMaxLag, DefaultSinkMaxLag)
	setDefault(&o.RetentionInterval, 5*time.Minute)
	setDefault(&o.ShutdownTimeout, 30*time.Second)
	setDefault(&o.RejectLogInterval, time.Second)
	setDefault(&o.TickInterval, time.Second)
	setDefault(&o.StreamHeartbeat, 15*time.Second)
	setDefault(&o.MQTTMaxConnsPerDevice, 4)
	setDefault(&o.MQTTMaxRetainedBytes, broker.DefaultMaxRetainedBytes)
	setDefault(&o.MQTTClientQueue, broker.DefaultClientQueue)
	setDefault(&o.HTTPReadTimeout, 30*time.Second)
	setDefault(&o.HTTPWriteTimeout, 2*time.Minute)
	setDefault(&o.HTTPMaxRequestBytes, 64<<10)
	setDefault(&o.HTTPMaxQueries, max(1, runtime.GOMAXPROCS(0)/2))
	setDefault(&o.HTTPQueryWait, time.Second)
	setDefault(&o.HTTPQueryTimeout, min(30*time.Second, o.HTTPWriteTimeout))
	setDefault(&o.HTTPClusterWait, min(2*time.Second, o.HTTPQueryTimeout))
	setDefault(&o.EventsBurst, o.MaxEventsPerSecond)
	o.NATS.EnsureDefaults()
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.MQTTAuthThrottle.Now == nil {
		o.MQTTAuthThrottle.Now = o.Now
	}
	o.MQTTAuthThrottle.EnsureDefaults()
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Registerer == nil {
		reg := prometheus.NewRegistry()
		o.Registerer, o.Gatherer = reg, reg
	}
	if o.Gatherer == nil {
		if g, ok := o.Registerer.(prometheus.Gatherer); ok {
			o.Gatherer = g
		} else {
			o.Gatherer = prometheus.DefaultGatherer
		}
	}
}

// setDefault sets *p to d when it is the zero value.
func setDefault[T comparable](p *T, d T) {
	var zero T
	if *p == zero {
		*p = d
	}
}

// limitsWithDefaults fills zero limits from wire.DefaultLimits.
func limitsWithDefaults(l wire.Limits) wire.Limits {
	d := wire.DefaultLimits
	setDefault(&l.MaxFrameBytes, d.MaxFrameBytes)
	setDefault(&l.MaxBodyBytes, d.MaxBodyBytes)
	setDefault(&l.MaxEvents, d.MaxEvents)
	setDefault(&l.MaxTags, d.MaxTags)
	setDefault(&l.MaxGaps, d.MaxGaps)
	setDefault(&l.MaxStringBytes, d.MaxStringBytes)
	return l
}

// ErrInvalidOptions is wrapped by every Validate error.
var ErrInvalidOptions = errors.New("invalid hub options")

// Validate checks the options after EnsureDefaults and names the first
// bad field.
func (o *Options) Validate() error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalidOptions, field, fmt.Sprintf(format, args...))
	}
	brokerErr := o.brokerSettings().CheckAddress()
	switch {
	case o.DataDir == "":
		return bad("DataDir", "required")
	case o.HTTPWriteToken != "" && o.HTTPWriteToken == o.HTTPReadToken:
		return bad("HTTPWriteToken", "must differ from HTTPReadToken (http-write-token authorizes writes; a reader must not hold it)")
	case o.HTTPAddr != HTTPOff && !confval.HostPort(o.HTTPAddr):
		return bad("HTTPAddr", "%q is not host:port", o.HTTPAddr)
	case brokerErr != nil:
		return fmt.Errorf("%w: %w", ErrInvalidOptions, brokerErr)
	case o.Workers < 1 || o.Workers > 1024:
		return bad("Workers", "%d outside [1, 1024]", o.Workers)
	case o.QueueLen < 1:
		return bad("QueueLen", "%d must be positive", o.QueueLen)
	case o.MaxGroupBatches < 1:
		return bad("MaxGroupBatches", "%d must be positive", o.MaxGroupBatches)
	case o.MaxGroupBytes < 1<<16:
		return bad("MaxGroupBytes", "%d is below 64 KiB", o.MaxGroupBytes)
	case o.GroupCommitWait > maxGroupCommitWait || (o.GroupCommitWait < 0 && o.GroupCommitWait != NoGroupCommitWait):
		return bad("GroupCommitWait", "%v is not within 0 – %v", o.GroupCommitWait, maxGroupCommitWait)
	case o.MaxRangesPerStream < 1:
		return bad("MaxRangesPerStream", "%d must be positive", o.MaxRangesPerStream)
	case o.MaxStreamsPerDevice < 1 || o.MaxStreamsPerDevice > maxStreamsPerDevice:
		return bad("MaxStreamsPerDevice", "%d outside [1, %d]", o.MaxStreamsPerDevice, maxStreamsPerDevice)
	case o.StreamIdleExpiry < minStreamIdleExpiry:
		return bad("StreamIdleExpiry", "%v is below the minimum %v", o.StreamIdleExpiry, minStreamIdleExpiry)
	case o.PublishTimeout <= 0:
		return bad("PublishTimeout", "%v must be positive", o.PublishTimeout)
	case o.CheckpointInterval < minCheckpointInterval:
		return bad("CheckpointInterval", "%v is below the minimum %v", o.CheckpointInterval, minCheckpointInterval)
	case o.RetentionMaxAge < minRetentionMaxAge:
		return bad("RetentionMaxAge", "%v is below the minimum %v", o.RetentionMaxAge, minRetentionMaxAge)
	case o.RetentionMaxAge < o.CheckpointInterval:
		return bad("RetentionMaxAge", "%v is shorter than CheckpointInterval %v: entries would be deleted as soon as a checkpoint covers them", o.RetentionMaxAge, o.CheckpointInterval)
	case o.RetentionInterval < minRetentionInterval:
		return bad("RetentionInterval", "%v is below the minimum %v", o.RetentionInterval, minRetentionInterval)
	case o.ShutdownTimeout < minShutdownTimeout:
		return bad("ShutdownTimeout", "%v is below the minimum %v", o.ShutdownTimeout, minShutdownTimeout)
	case o.RejectLogInterval <= 0:
		return bad("RejectLogInterval", "%v must be positive", o.RejectLogInterval)
	case o.TickInterval < minTickInterval:
		return bad("TickInterval", "%v is below the minimum %v", o.TickInterval, minTickInterval)
	case o.StreamHeartbeat <= 0:
		return bad("StreamHeartbeat", "%v must be positive", o.StreamHeartbeat)
	}
	if err := o.validateSecurity(bad); err != nil {
		return err
	}
	if err := o.validateNATS(bad); err != nil {
		return err
	}
	if o.Aggregate != nil {
		a := *o.Aggregate
		a.EnsureDefaults()
		if err := a.Validate(); err != nil {
			return fmt.Errorf("%w: Aggregate: %w", ErrInvalidOptions, err)
		}
	}
	return o.validateLimits()
}

// validateLimits checks the batch limits.
func (o *Options) validateLimits() error {
	l := o.Limits
	for _, f := range []struct {
		name string
		v    int
	}{
		{"Limits.MaxFrameBytes", l.MaxFrameBytes}, {"Limits.MaxBodyBytes", l.MaxBodyBytes},
		{"Limits.MaxEvents", l.MaxEvents}, {"Limits.MaxTags", l.MaxTags},
		{"Limits.MaxGaps", l.MaxGaps}, {"Limits.MaxStringBytes", l.MaxStringBytes},
	} {
		if f.v < 1 {
			return fmt.Errorf("%w: %s: %d must be positive", ErrInvalidOptions, f.name, f.v)
		}
	}
	return nil
}

// validateSecurity checks the broker's security options (broker.Settings),
// the rate limit and the HTTP API's options (api.Settings).
func (o *Options) validateSecurity(bad func(field, format string, args ...any) error) error {
	switch err := o.brokerSettings().CheckSecurity(); {
	case err != nil:
		return fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	case o.MaxEventsPerSecond < 0 || math.IsNaN(o.MaxEventsPerSecond) || math.IsInf(o.MaxEventsPerSecond, 0):
		return bad("MaxEventsPerSecond", "%v: want a finite rate >= 0", o.MaxEventsPerSecond)
	case o.EventsBurst < 0 || math.IsNaN(o.EventsBurst) || math.IsInf(o.EventsBurst, 0):
		return bad("EventsBurst", "%v: want a finite size >= 0", o.EventsBurst)
	}
	if err := o.MQTTAuthThrottle.Validate(); err != nil {
		return fmt.Errorf("%w: MQTTAuthThrottle.%w", ErrInvalidOptions, err)
	}
	if err := o.httpSettings().Check(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	return nil
}

// brokerSettings are the options that broker.Settings checks.
func (o *Options) brokerSettings() *broker.Settings {
	return &broker.Settings{Listen: o.MQTTListen, URL: o.MQTTURL, Group: o.Group,
		CAFile: o.MQTTCAFile, CertFile: o.MQTTCertFile, KeyFile: o.MQTTKeyFile, ServerName: o.MQTTServerName,
		AuthFile: o.MQTTAuthFile, TLSCertFile: o.MQTTTLSCertFile, TLSKeyFile: o.MQTTTLSKeyFile, TLSClientCAFile: o.MQTTTLSClientCAFile,
		DenyAnonymous: o.MQTTDenyAnonymous, ClientQueue: o.MQTTClientQueue, MaxConnsPerDevice: o.MQTTMaxConnsPerDevice,
		MaxRetainedBytes: o.MQTTMaxRetainedBytes}
}

// brokerSecurity loads the embedded broker's credentials and TLS files.
func (o *Options) brokerSecurity() (broker.BrokerSecurity, error) {
	sec := broker.BrokerSecurity{DenyAnonymous: o.MQTTDenyAnonymous, MaxConnsPerDevice: max(o.MQTTMaxConnsPerDevice, 0),
		MaxRetainedBytes: o.MQTTMaxRetainedBytes, Throttle: o.MQTTAuthThrottle}
	if o.MQTTAuthFile != "" {
		c, err := broker.LoadCredentials(o.MQTTAuthFile)
		if err != nil {
			return sec, fmt.Errorf("%w: MQTTAuthFile: %w", ErrInvalidOptions, err)
		}
		sec.Credentials = c
	}
	if o.MQTTTLSCertFile != "" {
		c, err := broker.BrokerTLSConfig(o.MQTTTLSCertFile, o.MQTTTLSKeyFile, o.MQTTTLSClientCAFile)
		if err != nil {
			return sec, fmt.Errorf("%w: MQTTTLSCertFile: %w", ErrInvalidOptions, err)
		}
		sec.TLS = c
	}
	return sec, nil
}
