package main

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/spf13/cast"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"edgeflow/aggregate"
	"edgeflow/hub"
	"edgeflow/hub/membudget"
	"edgeflow/hub/sinks"
	"edgeflow/internal/confval"
)

// config is hubd's configuration: hub options plus what only main uses.
type config struct {
	hub      hub.Options
	logLevel slog.Level
	// pprofAddr serves runtime profiles (package debugsrv); empty: off.
	pprofAddr string
	// demo runs a simulated fleet beside the hub (package demo).
	demo bool
	// gomaxprocs is the gomaxprocs key (see procsFor); 0: auto.
	gomaxprocs int
	// gcPercent is the gc-percent key (see gcPercentFor), gcPercentSet
	// whether it was given at all.
	gcPercent    int
	gcPercentSet bool
	// memory is the memory budget's sizes (membudget.go), memoryChosen
	// whether memory-limit or a profile other than server was set.
	memory       membudget.Sizes
	memoryChosen bool
}

// newFlags declares every configuration key as a flag; the same names are
// the YAML keys, and HUBD_<NAME> (dashes as underscores) the environment.
func newFlags() *pflag.FlagSet {
	fs := pflag.NewFlagSet("hubd", pflag.ContinueOnError)
	fs.String("config", "", "YAML config file (keys as the flag names)")
	fs.String("data-dir", "hubd-data", "directory of the hub's write-ahead log and checkpoints")
	fs.String("http-addr", ":8080", "HTTP API address (\"off\" disables it)")
	fs.Int("http-max-queries", 0, "expensive queries (/v1/aggregates, /v1/events, /v1/partials) that run at once; more wait up to http-query-wait, then get 429 (0: GOMAXPROCS/2, at least 1)")
	fs.String("http-query-wait", "1s", "how long a query waits for one of http-max-queries before a 429 with Retry-After (at most 1m)")
	fs.String("http-query-timeout", "30s", "how long one query may run before it is stopped with a 503 (at most 2m); ingest waits for a running query")
	fs.String("http-cluster-wait", "2s", "in a cluster of hubs: how long an answer waits for a partition without a current owner before it answers partial (at most 1m and http-query-timeout)")
	fs.String("mqtt-listen", ":1883", "embedded MQTT broker address (when --mqtt-url is empty)")
	fs.String("mqtt-url", "", "external MQTT broker, e.g. tcp://host:1883 (empty: embedded broker)")
	fs.String("client-id", "edgeflow-hubd", "MQTT client id on an external broker (keep it stable)")
	fs.String("mqtt-username", "", "username for the external broker")
	fs.String("mqtt-password", "", "password for the external broker")
	fs.String("group", "", "shared subscription group on an external broker")
	fs.Int("mqtt-client-queue", 1024, "messages the embedded broker queues for one client that is not reading before it drops them (8 bytes per connection each)")
	fs.String("log-level", "info", "debug, info, warn or error")
	fs.String("checkpoint-interval", "1m", "time between checkpoints")
	fs.String("retention-max-age", "168h", "how long logged batches are kept")
	fs.String("retention-interval", "5m", "time between retention passes")
	fs.Int("sink-max-lag", hub.DefaultSinkMaxLag, "log entries past the older retained checkpoint that a sink behind (its target down) still keeps from retention; a sink further behind whose entries retention then deletes is marked broken with the gap")
	fs.String("group-commit-wait", "2ms", "how long after a group commit (one fsync) the next may start at the earliest, gathering the batches that arrive meanwhile (0: commit as soon as a batch is there; at most 100ms)")
	fs.String("shutdown-timeout", "30s", "how long a stop (SIGINT, SIGTERM) may take to write, checkpoint and close the store before hubd exits without it")
	fs.Int("ack-qos", 0, "MQTT QoS of the hub's acks: 0 (an agent resends what a lost ack leaves unanswered), or 1 to have the broker keep acks for agents that just went offline at a PUBACK per ack message")
	fs.Int("workers", 0, "decode workers (0: one per CPU)")
	fs.Int("max-events", 0, "max events per batch (0: wire default)")
	fs.String("tick-interval", "1s", "time between logged ticks of the aggregate engine's processing time")
	fs.String("pprof-addr", "", "serve Go runtime profiles (/debug/pprof/) on this address, e.g. 127.0.0.1:6060 (empty: off)")
	fs.Int("gomaxprocs", 0, "Go Ps (threads running Go code) of hubd: 0 picks the runtime's choice, raised to 4 on a machine with fewer CPUs and no CPU limit (below 4 Go's garbage collector has no dedicated mark worker and its marks delay acks)")
	fs.Int("gc-percent", defaultGCPercent, "Go garbage collector target (GOGC) of hubd: 200 collects half as often as Go's 100 for a heap up to three times its live data; 0 keeps Go's default (GOGC in the environment is kept unless this is set)")
	fs.Bool("recover-damaged", false, "start (or rebuild) from what is readable when log entries of the store cannot be read, recording the loss as gaps with reason store_damaged (default: stop and say which entries)")
	fs.Bool("demo", false, "also run a simulated fleet of 20 devices against this hub (data in a temporary directory unless data-dir is set)")
	addSecurityFlags(fs)
	addClusterFlags(fs)
	addMemoryFlags(fs)
	return fs
}

// loadConfig merges defaults < YAML file < HUBD_* environment < flags.
func loadConfig(args []string) (*config, error) {
	fs := newFlags()
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		// A mistyped subcommand (hubd rebuidl) must not start a hub.
		return nil, fmt.Errorf("unexpected argument %q: the subcommands are rebuild, query and passwd, and flags start with --", fs.Arg(0))
	}
	v := viper.New()
	if err := v.BindPFlags(fs); err != nil {
		return nil, err
	}
	v.SetEnvPrefix("HUBD")
	v.SetEnvKeyReplacer(strings.NewReplacer("-", "_", ".", "_"))
	v.AutomaticEnv()
	setAggregateDefaults(v)
	if path := v.GetString("config"); path != "" {
		v.SetConfigFile(path)
		if err := v.ReadInConfig(); err != nil {
			return nil, fmt.Errorf("config file %s: %w", path, err)
		}
		if err := confval.CheckFileKeys(fs, v.AllKeys(), v.Get, isFileOnlyKey); err != nil {
			return nil, err
		}
	}
	return fromViper(v)
}

// fromViper converts and checks every key, naming the key on error.
func fromViper(v *viper.Viper) (*config, error) {
	c := &config{}
	o := &c.hub
	o.DataDir, o.HTTPAddr = v.GetString("data-dir"), v.GetString("http-addr")
	o.MQTTListen, o.MQTTURL = v.GetString("mqtt-listen"), v.GetString("mqtt-url")
	o.ClientID, o.Group = v.GetString("client-id"), v.GetString("group")
	o.Username, o.Password = v.GetString("mqtt-username"), v.GetString("mqtt-password")
	k := &confval.Keys{Get: v.Get}
	o.CheckpointInterval = k.Duration("checkpoint-interval", false)
	o.RetentionMaxAge = k.Duration("retention-max-age", false)
	o.RetentionInterval = k.Duration("retention-interval", false)
	o.SinkMaxLag = uint64(max(k.Int("sink-max-lag", 1), 1))
	o.ShutdownTimeout = k.Duration("shutdown-timeout", false)
	o.TickInterval = k.Duration("tick-interval", false)
	o.HTTPQueryWait = k.Duration("http-query-wait", false)
	o.HTTPQueryTimeout = k.Duration("http-query-timeout", false)
	o.HTTPClusterWait = k.Duration("http-cluster-wait", false)
	o.HTTPMaxQueries = k.Int("http-max-queries", 0)
	if o.GroupCommitWait = k.Duration("group-commit-wait", true); o.GroupCommitWait == 0 {
		o.GroupCommitWait = hub.NoGroupCommitWait
	}
	o.Workers = k.Int("workers", 0)
	o.MQTTClientQueue = k.Int("mqtt-client-queue", 0)
	if n, err := cast.ToIntE(v.Get("mqtt-client-queue")); err == nil && n == 0 {
		// hub.Options takes 0 as its default; written in a config, 0
		// reads as "no queue" or "unbounded", and is neither.
		k.Fail("mqtt-client-queue", "0 is not a queue length (it does not mean unbounded): want a positive number of messages per client, default 1024")
	}
	switch q := k.String("ack-qos"); q {
	case "0", "1":
		o.AcksAtLeastOnce = q == "1"
	default:
		k.Fail("ack-qos", "%q is not 0 or 1", q)
	}
	o.Limits.MaxEvents = k.Int("max-events", 0)
	c.logLevel = k.LogLevel("log-level")
	c.demo = v.GetBool("demo")
	o.RecoverDamaged = v.GetBool("recover-damaged")
	if c.gomaxprocs = v.GetInt("gomaxprocs"); c.gomaxprocs < 0 || c.gomaxprocs > 1024 {
		k.Fail("gomaxprocs", "%d is not 0 (auto) or 1..1024", c.gomaxprocs)
	}
	c.gcPercent, c.gcPercentSet = v.GetInt("gc-percent"), v.IsSet("gc-percent")
	if c.gcPercent != 0 && (c.gcPercent < 10 || c.gcPercent > 10000) {
		k.Fail("gc-percent", "%d is not 0 (Go's default) or 10..10000", c.gcPercent)
	}
	c.pprofAddr = v.GetString("pprof-addr")
	if c.demo && !v.IsSet("data-dir") {
		o.DataDir = "" // the demo uses a fresh temporary directory
	} else if o.DataDir == "" {
		k.Fail("data-dir", "must not be empty")
	}
	k.Add(securityFromViper(v, o))
	k.Add(clusterFromViper(v, o))
	agg, err := aggregateFromViper(v)
	k.Add(err)
	o.Aggregate = agg
	o.Rules, err = rulesFromViper(v)
	k.Add(err)
	o.Sinks, err = sinks.Parse(v.Get("sinks"))
	k.Add(err)
	o.AlertOutputs, err = alertOutputsFromViper(v)
	k.Add(err)
	c.memory, c.memoryChosen = memoryBudget(v, k, o)
	c.gcPercent, c.gcPercentSet = budgetGCPercent(c.gcPercent, c.gcPercentSet, c.memory, os.Getenv)
	return c, k.Err()
}

// optionKeys maps hub.Options fields to config keys, so a hub.Validate
// error names the key the operator set.
var optionKeys = map[string]string{
	"DataDir": "data-dir", "HTTPAddr": "http-addr", "MQTTListen": "mqtt-listen", "MQTTURL": "mqtt-url",
	"Group": "group", "Workers": "workers", "Limits.MaxEvents": "max-events",
	"CheckpointInterval": "checkpoint-interval", "RetentionMaxAge": "retention-max-age",
	"RetentionInterval": "retention-interval", "SinkMaxLag": "sink-max-lag", "ShutdownTimeout": "shutdown-timeout", "GroupCommitWait": "group-commit-wait", "ClientID": "client-id", "TickInterval": "tick-interval",
	"MQTTAuthFile": "mqtt-auth-file", "MQTTTLSCertFile": "mqtt-tls-cert", "MQTTTLSClientCAFile": "mqtt-tls-client-ca",
	"MQTTDenyAnonymous": "mqtt-allow-anonymous", "MQTTMaxConnsPerDevice": "mqtt-max-conns-per-device", "MQTTClientQueue": "mqtt-client-queue",
	"MaxEventsPerSecond": "max-events-per-second", "EventsBurst": "events-burst",
	"MaxStreamsPerDevice": "max-streams-per-device", "StreamIdleExpiry": "stream-idle-expiry",
	"HTTPTLSCertFile": "http-tls-cert", "HTTPReadToken": "http-read-token", "HTTPWriteToken": "http-write-token",
	"MQTTCAFile": "mqtt-ca-file", "MQTTCertFile": "mqtt-cert-file",
	"HTTPMaxQueries": "http-max-queries", "HTTPQueryWait": "http-query-wait", "HTTPQueryTimeout": "http-query-timeout",
	"HTTPClusterWait":      "http-cluster-wait",
	"MQTTMaxRetainedBytes": "mqtt-max-retained-bytes", "MQTTAuthThrottle.ClientFailures": "mqtt-auth-client-failures",
	"MQTTAuthThrottle.SourceFailures": "mqtt-auth-source-failures",
	"NATS.URLs":                       "nats-url", "NATS.Stream": "nats-stream", "NATS.Partitions": "nats-partitions",
	"NATS.Replicas": "nats-replicas", "NATS.MaxAge": "nats-max-age", "NATS.MaxBytes": "nats-max-bytes",
	"NATS.SnapshotInterval": "nats-snapshot-interval", "HubID": "hub-id", "HTTPAdvertiseURL": "http-advertise-url",
	"Rules": "rules", "AlertOutputs": "alert_outputs", "Sinks": "sinks", "NATS.LeaseTTL": "cluster-lease-ttl",
	"NATS.CheckpointEvery": "cluster-checkpoint-every", "NATS.CheckpointInterval": "cluster-checkpoint-interval",
	"NATS.CredsFile": "nats-creds", "NATS.User": "nats-user", "NATS.Password": "nats-password", "NATS.Token": "nats-token",
	"NATS.TLSCertFile": "nats-tls-cert", "NATS.TLSKeyFile": "nats-tls-key",
}

// explainOptionsError rewrites "invalid hub options: Field: ..." to name
// the config key.
func explainOptionsError(err error) error {
	if !errors.Is(err, hub.ErrInvalidOptions) {
		return err
	}
	msg := strings.TrimPrefix(err.Error(), hub.ErrInvalidOptions.Error()+": ")
	field, rest, ok := strings.Cut(msg, ": ")
	if field == "Aggregate" {
		// aggregate.Options.Validate names the field by its YAML key
		rest = strings.TrimPrefix(rest, aggregate.ErrInvalidOption.Error()+": ")
		if key, why, ok := strings.Cut(rest, ": "); ok {
			return fmt.Errorf("config key %q: %s", "aggregate."+key, why)
		}
		return fmt.Errorf("config section \"aggregate\": %s", rest)
	}
	if key, known := optionKeys[field]; ok && known {
		return fmt.Errorf("config key %q: %s", key, optionFields.ReplaceAllStringFunc(rest, func(f string) string { return optionKeys[f] }))
	}
	return err
}

// optionFields matches the field names of optionKeys in a message, so
// that a rule across fields ("shorter than CheckpointInterval") names the
// other key too.
var optionFields = func() *regexp.Regexp {
	fields := slices.Sorted(maps.Keys(optionKeys))
	for i, f := range fields {
		fields[i] = regexp.QuoteMeta(f)
	}
	return regexp.MustCompile(`\b(` + strings.Join(fields, "|") + `)\b`)
}()
