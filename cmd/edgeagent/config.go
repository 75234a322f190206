package main

import (
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"edgeflow/agent"
	"edgeflow/buffer"
	"edgeflow/internal/confval"
	"edgeflow/uplink"
)

// defaultLowMemoryLimit is the Go memory limit the low-memory profile sets
// when neither memory-limit nor GOMEMLIMIT says otherwise.
const defaultLowMemoryLimit = 32 << 20

// config is the agent's configuration: agent options plus what only main
// uses.
type config struct {
	agent       agent.Options
	logLevel    slog.Level
	memoryLimit int64 // bytes for debug.SetMemoryLimit; 0 leaves the runtime's
	showVersion bool
}

// newFlags declares every configuration key as a flag; the same names are
// the YAML keys, and EDGEAGENT_<NAME> (dashes as underscores) the
// environment.
func newFlags() *pflag.FlagSet {
	fs := pflag.NewFlagSet("edgeagent", pflag.ContinueOnError)
	fs.String("config", "", "YAML config file (keys as the flag names)")
	fs.String("device-id", "", "device id the hub knows this device by (required)")
	fs.String("data-dir", "edgeagent-data", "directory of the durable buffer (Badger)")
	fs.String("listen", "127.0.0.1:8181", "HTTP ingest, status and metrics address (\"off\" disables it)")
	fs.String("udp-listen", "127.0.0.1:8089", "InfluxDB line protocol over UDP (\"off\" disables it)")
	fs.String("mqtt-url", "tcp://127.0.0.1:1883", "broker URL(s), comma-separated, tried in order (tcp://, ssl://, ws://)")
	fs.String("mqtt-client-id", "", "MQTT client id, stable across restarts (default edgeflow-<device-id>; NATS' MQTT listener refuses '.' in it)")
	fs.Int("mqtt-ack-qos", 1, "QoS of the subscription to the hub's acks: 1 (the broker queues acks for an offline agent) or 0 (nothing queued or replicated; missed acks are made up by resends; for NATS clusters)")
	fs.String("mqtt-username", "", "broker username")
	fs.String("mqtt-password", "", "broker password (prefer mqtt-password-file)")
	fs.String("mqtt-password-file", "", "file holding the broker password")
	fs.String("tls-ca-file", "", "PEM CA bundle for the broker's certificate (default: system roots)")
	fs.String("tls-cert-file", "", "PEM client certificate for mutual TLS")
	fs.String("tls-key-file", "", "PEM client key for mutual TLS")
	fs.String("tls-server-name", "", "name checked against the broker's certificate (default: URL host)")
	fs.String("ntp-servers", "0.pool.ntp.org,1.pool.ntp.org,2.pool.ntp.org", "NTP servers, comma-separated (empty disables NTP)")
	fs.Bool("time-hub", true, "ask the hub for the time over MQTT when NTP does not answer (a second small connection)")
	fs.Bool("trust-device-clock", false, "with no time source, stamp events DEVICE (trusted) instead of UNTRUSTED")
	fs.String("durability", "interval", "buffer durability: sync, interval or none")
	fs.String("sync-interval", "100ms", "fsync period of the interval durability")
	fs.String("profile", "low-memory", "buffer memory profile: default or low-memory")
	fs.String("memory-limit", "", "Go memory limit, e.g. 32MiB; empty: 32MiB with low-memory unless GOMEMLIMIT is set; \"off\": none")
	fs.String("page-out", "", "how often to hand Badger's mapped files back to the kernel (Linux); empty: 100ms with low-memory, \"off\": never")
	fs.String("buffer-compression", "auto", "form of buffered blocks on disk: columns (events as the wire's columns, sent as stored), s2, none (readable by agents before s2), or auto (columns when compression is columns, else s2)")
	fs.String("buffer-max-bytes", "256MiB", "bound of the buffered events on disk")
	fs.String("buffer-max-age", "0", "drop buffered events older than this (0: keep until the size bound)")
	fs.String("buffer-full-policy", "drop_oldest", "at the bound: drop_oldest, reject or block")
	fs.String("buffer-disk-reserve", "auto", "free space kept on the buffer's filesystem; below it the full policy applies (auto: from the profile, \"off\": no guard)")
	fs.String("max-body-bytes", "1MiB", "largest POST /v1/events body")
	fs.String("http-token", "", "bearer token for every HTTP endpoint but /healthz (prefer http-token-file)")
	fs.String("http-token-file", "", "file holding the HTTP bearer token")
	fs.String("http-tls-cert", "", "PEM certificate: serve the HTTP API over TLS (with http-tls-key)")
	fs.String("http-tls-key", "", "PEM key of http-tls-cert")
	fs.Int("batch-max-events", 1000, "events per uploaded batch")
	fs.String("batch-linger", "100ms", "how long a partial batch waits for more events")
	fs.Int("batch-window", 8, "batches awaiting the hub's ack at once")
	fs.String("compression", "columns", "batch encoding: columns (smallest and cheapest for readings), zstd, s2 or none")
	fs.String("first-sync-wait", "2s", "at start, how long the first upload waits for the clock's first trusted estimate (at most 1m; 0: no wait)")
	fs.String("drain-timeout", "5s", "on shutdown, how long a connected uplink may send what is buffered")
	fs.String("log-level", "info", "debug, info, warn or error")
	fs.Bool("version", false, "print the version and exit")
	return fs
}

// loadConfig merges defaults < YAML file < EDGEAGENT_* environment < flags.
func loadConfig(args []string, getenv func(string) string) (*config, error) {
	fs := newFlags()
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if len(fs.Args()) > 0 {
		return nil, fmt.Errorf("unexpected arguments %q (every setting is a --flag)", fs.Args())
	}
	v := viper.New()
	if err := v.BindPFlags(fs); err != nil {
		return nil, err
	}
	v.SetEnvPrefix("EDGEAGENT")
	v.SetEnvKeyReplacer(strings.NewReplacer("-", "_"))
	v.AutomaticEnv()
	if path := v.GetString("config"); path != "" {
		v.SetConfigFile(path)
		v.SetConfigType("yaml")
		if err := v.ReadInConfig(); err != nil {
			return nil, fmt.Errorf("config file %s: %w", path, err)
		}
		if err := confval.CheckFileKeys(fs, v.AllKeys(), v.Get, nil, "mqtt-url", "ntp-servers"); err != nil {
			return nil, err
		}
	}
	return fromViper(v, getenv)
}

// parser reads the agent's keys (confval.Keys) under the short names
// fromViper's list of keys reads best with.
type parser struct {
	confval.Keys
	v *viper.Viper
}

func (p *parser) fail(key, format string, a ...any)         { p.Fail(key, format, a...) }
func (p *parser) str(key string) string                     { return p.String(key) }
func (p *parser) dur(key string, zeroOK bool) time.Duration { return p.Duration(key, zeroOK) }
func (p *parser) size(key string) int64                     { return p.Size(key) }
func (p *parser) boolean(key string) bool                   { return p.Bool(key) }
func (p *parser) oneOf(key string, allowed ...string) string {
	return p.OneOf(key, allowed...)
}
func (p *parser) list(key string) []string { return p.List(key) }

// liftUserinfo takes credentials out of the broker URLs
// (tcp://user:pass@host:1883) into the username and password options, so
// no URL that reaches a log line or an error holds a password. Paho would
// use them the same way. URLs that carry different credentials, or
// credentials other than mqtt-username/mqtt-password, are an error that
// shows neither.
func (p *parser) liftUserinfo(brokers []string, user, pass string) ([]string, string, string) {
	out := make([]string, 0, len(brokers))
	for _, b := range brokers {
		u, err := url.Parse(b)
		if err != nil || u.User == nil {
			out = append(out, b) // validation reports it, redacted
			continue
		}
		uu := u.User.Username()
		up, hasPass := u.User.Password()
		switch {
		case user != "" && uu != user, hasPass && pass != "" && up != pass:
			p.fail("mqtt-url", "credentials in a broker URL differ from mqtt-username/mqtt-password or another URL's; set them once in mqtt-username and mqtt-password-file")
			return brokers, user, pass
		}
		user = uu
		if hasPass {
			pass = up
		}
		u.User = nil
		out = append(out, u.String())
	}
	return out, user, pass
}

// fromViper converts and checks every key, naming the key on error.
func fromViper(v *viper.Viper, getenv func(string) string) (*config, error) {
	p := &parser{Keys: confval.Keys{Get: v.Get}, v: v}
	c := &config{showVersion: p.boolean("version")}
	if c.showVersion {
		return c, nil
	}
	o := &c.agent
	o.DeviceID, o.DataDir = p.str("device-id"), p.str("data-dir")
	if o.DeviceID == "" {
		p.fail("device-id", "required (the id the hub knows this device by)")
	}
	if o.DataDir == "" {
		p.fail("data-dir", "must not be empty")
	}
	o.HTTPAddr, o.UDPAddr = p.str("listen"), p.str("udp-listen")
	if o.HTTPAddr == "" {
		p.fail("listen", `must not be empty (use "off" to disable HTTP)`)
	}
	if o.UDPAddr == agent.Off {
		o.UDPAddr = ""
	}
	o.NTPServers = p.list("ntp-servers")
	o.TimeHub, o.TrustDeviceClock = p.boolean("time-hub"), p.boolean("trust-device-clock")

	bufferKeys(p, o)
	httpKeys(p, o)
	uplinkKeys(p, &o.Uplink)
	o.FirstSyncWait = p.dur("first-sync-wait", true)
	if o.FirstSyncWait == 0 {
		o.FirstSyncWait = agent.NoFirstSyncWait
	}
	o.DrainTimeout = p.dur("drain-timeout", true)
	if o.DrainTimeout == 0 {
		o.DrainTimeout = agent.NoDrain
	}
	c.logLevel = p.LogLevel("log-level")
	c.memoryLimit = memoryLimit(p, o.Buffer.Profile, getenv)
	if err := p.Err(); err != nil {
		return nil, err
	}
	if err := validate(*o); err != nil {
		return nil, err
	}
	return c, nil
}

// validate runs the agent's own option checks on a copy of o (main sets
// the logger and registry before agent.New), naming the config key.
func validate(o agent.Options) error {
	o.Registerer, o.Gatherer = prometheus.NewRegistry(), nil
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return explain(err)
	}
	return nil
}

// bufferKeys reads the durable buffer's keys.
func bufferKeys(p *parser, o *agent.Options) {
	o.Buffer.Durability = buffer.Durability(p.oneOf("durability", "sync", "interval", "none"))
	o.Buffer.SyncInterval = p.dur("sync-interval", false)
	o.Buffer.Profile = buffer.Profile(p.oneOf("profile", "default", "low-memory"))
	o.Buffer.BlockCompression = buffer.BlockCompression(p.oneOf("buffer-compression", "auto", "columns", "s2", "none"))
	if o.Buffer.BlockCompression == "auto" {
		o.Buffer.BlockCompression = uplink.BufferBlocks(p.str("compression"))
	}
	switch s := p.str("page-out"); s {
	case "":
	case agent.Off:
		o.Buffer.PageOutInterval = -1
	default:
		o.Buffer.PageOutInterval = p.dur("page-out", false)
	}
	o.Stream.MaxBytes = p.size("buffer-max-bytes")
	o.Stream.MaxAge = p.dur("buffer-max-age", true)
	o.Stream.Full = buffer.FullPolicy(p.oneOf("buffer-full-policy", "drop_oldest", "reject", "block"))
	switch s := p.str("buffer-disk-reserve"); s {
	case "auto", "":
	case agent.Off:
		o.Buffer.DiskReserve = -1
	default:
		if o.Buffer.DiskReserve = p.size("buffer-disk-reserve"); o.Buffer.DiskReserve == 0 {
			o.Buffer.DiskReserve = -1
		}
	}
}

// httpKeys reads the local HTTP API's keys.
func httpKeys(p *parser, o *agent.Options) {
	o.MaxBodyBytes = p.size("max-body-bytes")
	o.HTTPToken = p.secret("http-token")
	o.HTTPTLSCertFile, o.HTTPTLSKeyFile = p.str("http-tls-cert"), p.str("http-tls-key")
}

// uplinkKeys reads the broker connection's and the batches' keys.
func uplinkKeys(p *parser, u *uplink.Options) {
	u.Brokers = p.list("mqtt-url")
	if len(u.Brokers) == 0 {
		p.fail("mqtt-url", "at least one broker URL is required, e.g. tcp://hub:1883")
	}
	u.ClientID = p.str("mqtt-client-id")
	switch q := p.Int("mqtt-ack-qos", 0); { // Int has failed a negative or non-number
	case q == 0:
		u.AckQoS = uplink.AckQoSAtMostOnce
	case q == 1:
		u.AckQoS = 1
	default:
		p.fail("mqtt-ack-qos", "%d: want 0 or 1", q)
	}
	u.Username, u.Password = p.str("mqtt-username"), p.secret("mqtt-password")
	u.Brokers, u.Username, u.Password = p.liftUserinfo(u.Brokers, u.Username, u.Password)
	u.TLS = uplink.TLSOptions{CAFile: p.File("tls-ca-file"), CertFile: p.File("tls-cert-file"),
		KeyFile: p.File("tls-key-file"), ServerName: p.str("tls-server-name")}
	u.MaxBatchEvents = p.Int("batch-max-events", 1)
	u.Linger = p.dur("batch-linger", true)
	u.Window = p.Int("batch-window", 1)
	u.Compression = p.str("compression")
	if u.Linger == 0 {
		u.Linger = uplink.NoLinger
	}
}

// secret reads key, or the first line of the file key-file names when it
// is set (the file wins, so a secret need not be in the environment).
func (p *parser) secret(key string) string {
	f := p.str(key + "-file")
	if f == "" {
		return p.v.GetString(key)
	}
	b, err := os.ReadFile(f)
	if err != nil {
		p.fail(key+"-file", "%v", err)
	}
	return strings.TrimRight(string(b), "\r\n")
}

// memoryLimit resolves memory-limit: explicit size, "off", or the
// low-memory default when GOMEMLIMIT is unset.
func memoryLimit(p *parser, profile buffer.Profile, getenv func(string) string) int64 {
	s := p.str("memory-limit")
	switch {
	case s == "off" || s == "0":
		return 0
	case s != "":
		n := p.size("memory-limit")
		if n != 0 && n < 8<<20 {
			p.fail("memory-limit", "%s is below 8MiB, too little to run", s)
		}
		return n
	case profile == buffer.ProfileLowMemory && getenv("GOMEMLIMIT") == "":
		return defaultLowMemoryLimit
	}
	return 0
}

// errorKeys maps the prefixes of option errors to the config key to fix.
var errorKeys = []struct{ prefix, key string }{
	{"agent: device id", "device-id"}, {"uplink: device id", "device-id"}, {"uplink: client id", "mqtt-client-id"}, {"uplink: ack qos", "mqtt-ack-qos"},
	{"agent: data dir", "data-dir"}, {"agent: http addr", "listen"}, {"agent: http listen", "listen"},
	{"agent: udp addr", "udp-listen"}, {"agent: udp listen", "udp-listen"},
	{"agent: max body bytes", "max-body-bytes"}, {"agent: ntp servers", "ntp-servers"},
	{"agent: drain timeout", "drain-timeout"}, {"agent: first sync wait", "first-sync-wait"}, {"agent: http tls", "http-tls-cert"}, {"agent: http token", "http-token"},
	{"buffer: durability", "durability"}, {"buffer: sync interval", "sync-interval"}, {"buffer: profile", "profile"},
	{"buffer: stream max bytes", "buffer-max-bytes"}, {"buffer: stream max age", "buffer-max-age"},
	{"buffer: full policy", "buffer-full-policy"}, {"buffer: page-out", "page-out"},
	{"buffer: block compression", "buffer-compression"}, {"buffer: disk reserve", "buffer-disk-reserve"},
	{"uplink: brokers", "mqtt-url"}, {"uplink: tls ca file", "tls-ca-file"}, {"agent: tls ca file", "tls-ca-file"},
	{"uplink: tls client certificate", "tls-cert-file"}, {"agent: tls client certificate", "tls-cert-file"},
	{"uplink: tls", "tls-cert-file"}, {"uplink: max batch events", "batch-max-events"}, {"uplink: linger", "batch-linger"},
	{"uplink: window", "batch-window"}, {"uplink: compression", "compression"},
}

// explain prefixes an options error with the config key it is about.
func explain(err error) error {
	msg := err.Error()
	for _, ek := range errorKeys {
		if strings.HasPrefix(msg, ek.prefix) {
			return fmt.Errorf("config key %q: %w", ek.key, err)
		}
	}
	return err
}
