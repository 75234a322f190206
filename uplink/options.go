package uplink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"edgeflow/internal/tlsconf"
	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// Bounds that Validate enforces. The batch bounds stay well inside the
// hub's decoder limits (wire.DefaultLimits: 100,000 events, 8 MiB frames).
const (
	maxBatchEventsLimit = 100_000
	maxBatchBytesLimit  = 4 << 20
	maxWindowLimit      = 1024
)

// TLSOptions configure TLS to the broker: the CA, client certificate and
// server name. TLS is on when any field is set or a broker URL uses the
// ssl://, tls://, mqtts:// or wss:// scheme. The agent's time connection
// dials with the same options.
type TLSOptions = tlsconf.Files

// Options configure an Uplink. Zero values take the defaults noted per field.
type Options struct {
	// DeviceID names the device in topics and batches. Required.
	DeviceID string
	// Brokers are broker URLs tried in order, e.g. tcp://127.0.0.1:1883 or
	// ssl://broker:8883. Required.
	Brokers []string
	// ClientID is the MQTT client id. It must be stable across restarts:
	// the broker keys the persistent session (and the ack subscription)
	// on it. Default "edgeflow-" + DeviceID.
	ClientID string
	// Username and Password authenticate to the broker (optional).
	Username, Password string
	// TLS configures TLS to the broker (optional).
	TLS TLSOptions

	// MaxBatchEvents bounds events per batch. Default 1000; 1..100,000.
	MaxBatchEvents int
	// MaxBatchBytes bounds the stored record bytes per batch (before
	// compression). Default 1 MiB; 1 KiB..4 MiB.
	MaxBatchBytes int
	// Linger is how long a partial batch waits for more events when there
	// is no backlog behind it. A backlog is always sent at once.
	// Default 100 ms; NoLinger sends at once; 1 ms to 1 minute.
	Linger time.Duration
	// Compression is the batch frames' codec: "columns" (the default:
	// events written column by column, for sensor readings about a third
	// of zstd's frame at under half its CPU at each end; a batch the
	// columns cannot carry goes with zstd), "zstd", "s2" (about a third of
	// zstd's CPU at both ends for frames about half again as large) or
	// "none". A hub older than the columnar codec refuses its frames; the
	// uplink then rewrites them as zstd and sends zstd from then on.
	Compression string
	// Window is how many batches may await the hub's ack at once. It also
	// bounds paho's QoS 1 messages in flight (paho #520). Default 8; 1..1024.
	Window int
	// AckTimeout is how long a batch waits for the hub's ack before it is
	// published again (the hub deduplicates). It doubles with each resend of
	// the same batch up to MaxAckTimeout. Default 10 s; 100 ms..10 min.
	AckTimeout time.Duration
	// MaxAckTimeout caps the doubled ack timeout. Default 8 x AckTimeout.
	MaxAckTimeout time.Duration
	// AckQoS is the QoS of the subscription to the hub's acks: 1 (the
	// default) or AckQoSAtMostOnce for QoS 0. At 1, with the kept session,
	// a broker queues acks for an offline agent; NATS' MQTT listener backs
	// each QoS 1 subscription with a JetStream consumer per device (a Raft
	// group in a cluster). At 0 nothing is queued or replicated: an ack
	// the agent misses is replaced by the hub's DUPLICATE answer to the
	// resend after AckTimeout.
	AckQoS int
	// PollInterval is how often the buffer is checked for new events when
	// nobody calls Notify. Default 100 ms; 1 ms..1 minute. A stream that
	// says when records become readable (buffer.Stream does) wakes the
	// uplink itself and is polled only every 5 s or PollInterval if
	// longer, as a safety net.
	PollInterval time.Duration
	// BandwidthBytesPerSec caps the bytes published per second (token
	// bucket over frames, resends included). 0, the default, is unlimited:
	// a backlog drains oldest first at full speed.
	BandwidthBytesPerSec int64

	// BackoffMin and BackoffMax bound the reconnect delay: attempt k waits a
	// uniformly random time in [0, min(BackoffMax, BackoffMin*2^k)] ("full
	// jitter"). Defaults 1 s and 60 s.
	BackoffMin, BackoffMax time.Duration
	// ConnectTimeout bounds one connection attempt and the subscription
	// after it. Default 10 s.
	ConnectTimeout time.Duration
	// KeepAlive is the MQTT keep-alive. Default 30 s; at least 1 s.
	KeepAlive time.Duration
	// WriteTimeout bounds handing one publish to paho's writer. Default 10 s.
	WriteTimeout time.Duration
	// StatusInterval is how often the retained online status (with backlog
	// figures) is refreshed while connected. Default 30 s.
	StatusInterval time.Duration
	// LogEvery rate-limits repeated warnings (rejections, bad acks).
	// Default 10 s.
	LogEvery time.Duration

	// Retime, if set, repairs an encoded event at send time (clocksync's
	// late time repair). An error sends the event as stored and is counted.
	// Nil sends events as stored. rec points into the buffer's read and is
	// valid only during the call: Retime may return it, never keep it.
	// Events stored with a method other than TIME_METHOD_UNTRUSTED may be
	// sent without a call (a block of them stored as columns goes as it
	// is), so Retime must return those unchanged.
	Retime func(rec []byte) ([]byte, error)
	// Clock, if set, gives the clock estimate carried in batches and status.
	Clock func() *wirepb.ClockEstimate
	// Version is the agent version reported in status messages.
	Version string
	// OnAck, if set, is called on the send loop when the hub's acks advance
	// the cumulative position to upTo, at the ack's arrival and before the
	// buffer is acknowledged (which may wait for a disk write): the moment
	// an event-to-ack latency ends. hubTimeNs is the hub's clock when it
	// made that ack (the ack's server_time_ns): a caller that shares the
	// hub's clock, as a fleet simulator on the hub's machine does, can
	// tell the way back from the hub from the rest. It must return quickly.
	OnAck func(upTo uint64, hubTimeNs int64)

	// Dial, if set, opens the TCP connection to the broker in place of
	// the default dialer, for tcp, mqtt and TLS broker URLs (TLS runs on
	// top of the returned connection); websocket URLs refuse it. It is how
	// a simulator puts latency, jitter or a silently dead link between a
	// device and its broker. Nil dials directly.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)

	// Now is the device wall clock stamped into batches (send_time) and
	// status messages. Default time.Now. Internal timeouts use the
	// runtime's monotonic timers, not Now.
	Now func() time.Time
	// Logger receives warnings and errors. Default slog.Default().
	Logger *slog.Logger
	// Metrics, if set, is shared with other Uplinks (one set of series for
	// a fleet simulator). Otherwise an Uplink creates its own and registers
	// it on Registerer, if that is set.
	Metrics *Metrics
	// Registerer receives the Uplink's metrics when Metrics is nil.
	Registerer prometheus.Registerer
}

// EnsureDefaults fills zero fields with their defaults.
func (o *Options) EnsureDefaults() {
	if o.ClientID == "" && o.DeviceID != "" {
		o.ClientID = "edgeflow-" + o.DeviceID
	}
	setDefault(&o.MaxBatchEvents, 1000)
	setDefault(&o.MaxBatchBytes, 1<<20)
	setDefault(&o.Linger, 100*time.Millisecond)
	setDefault(&o.Window, 8)
	setDefault(&o.Compression, wire.CodecColumns.String())
	setDefault(&o.AckTimeout, 10*time.Second)
	setDefault(&o.MaxAckTimeout, 8*o.AckTimeout)
	setDefault(&o.AckQoS, 1)
	setDefault(&o.PollInterval, 100*time.Millisecond)
	setDefault(&o.BackoffMin, time.Second)
	setDefault(&o.BackoffMax, 60*time.Second)
	setDefault(&o.ConnectTimeout, 10*time.Second)
	setDefault(&o.KeepAlive, 30*time.Second)
	setDefault(&o.WriteTimeout, 10*time.Second)
	setDefault(&o.StatusInterval, 30*time.Second)
	setDefault(&o.LogEvery, 10*time.Second)
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// setDefault sets *p to d when it is zero.
func setDefault[T comparable](p *T, d T) {
	var zero T
	if *p == zero {
		*p = d
	}
}

// NoLinger, as Options.Linger, sends partial batches at once; a zero
// Linger means the default.
const NoLinger = time.Duration(-1)

// Validate names the first field that is out of range.
func (o *Options) Validate() error {
	if err := wire.ValidateDeviceID(o.DeviceID); err != nil {
		return fmt.Errorf("uplink: device id: %w", err)
	}
	if len(o.Brokers) == 0 {
		return errors.New("uplink: brokers: at least one broker URL is required")
	}
	for _, b := range o.Brokers {
		u, err := url.Parse(b)
		if err != nil || u.Host == "" {
			return fmt.Errorf("uplink: brokers: %q is not a URL like tcp://host:1883", redactBroker(b))
		}
		switch u.Scheme {
		case "tcp", "mqtt", "ssl", "tls", "mqtts":
		case "ws", "wss":
			if o.Dial != nil {
				return fmt.Errorf("uplink: brokers: %q: a custom Dial does not carry websockets", redactBroker(b))
			}
		default:
			return fmt.Errorf("uplink: brokers: %q has scheme %q (want tcp, mqtt, ssl, tls, mqtts, ws or wss)", redactBroker(b), u.Scheme)
		}
	}
	if o.ClientID == "" || len(o.ClientID) > 256 {
		return fmt.Errorf("uplink: client id %q: want 1..256 bytes", o.ClientID)
	}
	if _, err := wire.ParseCodec(o.Compression); err != nil {
		return fmt.Errorf("uplink: compression: %w", err)
	}
	if (o.TLS.CertFile == "") != (o.TLS.KeyFile == "") {
		return errors.New("uplink: tls: cert file and key file go together")
	}
	checks := []struct {
		name      string
		ok        bool
		val, want any
	}{
		{"max batch events", o.MaxBatchEvents >= 1 && o.MaxBatchEvents <= maxBatchEventsLimit, o.MaxBatchEvents, "1..100000"},
		{"max batch bytes", o.MaxBatchBytes >= 1<<10 && o.MaxBatchBytes <= maxBatchBytesLimit, o.MaxBatchBytes, "1 KiB..4 MiB"},
		{"linger", o.Linger == NoLinger || (o.Linger >= time.Millisecond && o.Linger <= time.Minute), o.Linger, "NoLinger or 1ms..1m"},
		{"window", o.Window >= 1 && o.Window <= maxWindowLimit, o.Window, "1..1024"},
		{"ack timeout", o.AckTimeout >= 100*time.Millisecond && o.AckTimeout <= 10*time.Minute, o.AckTimeout, "100ms..10m"},
		{"ack qos", o.AckQoS == 1 || o.AckQoS == AckQoSAtMostOnce, o.AckQoS, "1, or AckQoSAtMostOnce (-1) for QoS 0"},
		{"max ack timeout", o.MaxAckTimeout >= o.AckTimeout && o.MaxAckTimeout <= time.Hour, o.MaxAckTimeout, "ack timeout..1h"},
		{"poll interval", o.PollInterval >= time.Millisecond && o.PollInterval <= time.Minute, o.PollInterval, "1ms..1m"},
		{"bandwidth bytes per sec", o.BandwidthBytesPerSec >= 0, o.BandwidthBytesPerSec, "0 (unlimited) or more"},
		{"backoff min", o.BackoffMin >= time.Millisecond, o.BackoffMin, "at least 1ms"},
		{"backoff max", o.BackoffMax >= o.BackoffMin && o.BackoffMax <= 24*time.Hour, o.BackoffMax, "backoff min..24h"},
		{"connect timeout", o.ConnectTimeout >= 100*time.Millisecond, o.ConnectTimeout, "at least 100ms"},
		{"keep alive", o.KeepAlive >= time.Second, o.KeepAlive, "at least 1s"},
		{"write timeout", o.WriteTimeout >= 10*time.Millisecond, o.WriteTimeout, "at least 10ms"},
		{"status interval", o.StatusInterval >= 100*time.Millisecond, o.StatusInterval, "at least 100ms"},
		{"log every", o.LogEvery > 0, o.LogEvery, "positive"},
	}
	for _, c := range checks {
		if !c.ok {
			return fmt.Errorf("uplink: %s %v: want %v", c.name, c.val, c.want)
		}
	}
	return nil
}

// AckQoSAtMostOnce, as Options.AckQoS, subscribes to acks at QoS 0; a
// zero AckQoS means the default, QoS 1.
const AckQoSAtMostOnce = -1

// ackQoS is the MQTT QoS of the ack subscription; Validate has checked
// AckQoS.
func (o *Options) ackQoS() byte {
	if o.AckQoS == AckQoSAtMostOnce {
		return 0
	}
	return 1
}

// linger is the effective linger (0 with NoLinger).
func (o *Options) linger() time.Duration { return max(o.Linger, 0) }

// codec is Compression parsed; Validate has checked it.
func (o *Options) codec() wire.Codec {
	c, _ := wire.ParseCodec(o.Compression)
	return c
}

// redactBroker shows a broker URL in an error without its password: a URL
// that does not parse, or has no // (user:pass@host parses as scheme
// "user"), is not shown at all.
func redactBroker(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.Opaque != "" {
		return "(unparsable broker url)"
	}
	return u.Redacted()
}
