package sinks

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cast"

	"edgeflow/aggregate"
	"edgeflow/internal/confval"
)

// Sink kinds.
const (
	// KindPostgresWindows writes window results to a PostgreSQL table.
	KindPostgresWindows = "postgres_windows"
	// KindPostgresEvents writes corrected events to a PostgreSQL table.
	KindPostgresEvents = "postgres_events"
	// KindNATS publishes window updates (final and revised) to a NATS
	// JetStream stream, each with a message id for deduplication, and
	// optionally the merged event stream.
	KindNATS = "nats"
	// KindMQTT publishes window updates (final and revised), and
	// optionally the merged event stream, to an MQTT broker at QoS 1,
	// each message with an id in its payload for deduplication.
	KindMQTT = "mqtt"
)

// kinds lists the sink kinds for error messages.
const kinds = KindPostgresWindows + ", " + KindPostgresEvents + ", " + KindNATS + ", " + KindMQTT

// ErrInvalidConfig marks a sink configuration the hub refuses; the message
// names the sink and the key.
var ErrInvalidConfig = errors.New("invalid sink")

// Config is one entry of the hub's `sinks:` list.
type Config struct {
	// Name identifies the sink: its row in the positions table, its
	// metrics' label. Unique among the hub's sinks.
	Name string
	// Kind is KindPostgresWindows, KindPostgresEvents, KindNATS or
	// KindMQTT.
	Kind string
	// DSN is the PostgreSQL connection string (URL or key=value form).
	DSN string
	// Table is the target table, optionally schema-qualified
	// ("analytics.edgeflow_windows"); created when absent.
	Table string
	// PositionsTable holds each sink's log position, in the target
	// table's schema unless qualified; for nats a key-value bucket, for
	// mqtt the first topic level of the retained position messages.
	// Default edgeflow_sink_positions.
	PositionsTable string
	// Metrics, Windows and GroupBy select the window results
	// (postgres_windows, nats, mqtt): every metric in Metrics, for each
	// window spec in Windows ("tumbling:1m", "hopping:5m/1m",
	// "sliding:5m", "session:30s" for postgres_windows only, or a
	// configured window's name), grouped by GroupBy ("device", "metric"
	// or a tag key).
	Metrics, Windows, GroupBy []string
	// Quantiles adds columns (fields) p50, p95 and/or p99.
	Quantiles []string
	// Provisional also writes windows that are not final yet (their row
	// is replaced as they change, and once more when they turn final).
	Provisional bool
	// BatchEntries bounds the log entries one transaction covers.
	// Default 512.
	BatchEntries int
	// PollInterval is how often an idle sink looks for new log entries.
	// Default 200ms.
	PollInterval time.Duration
	// MaxBackoff bounds the wait between retries while the target is
	// down (the wait doubles from 100ms). Default 10s.
	MaxBackoff time.Duration
	// URL is the NATS server list (kind nats), comma-separated, or the
	// MQTT broker (kind mqtt: tcp://, ssl://, ws://, with user:password@
	// for a broker that wants them).
	URL string
	// Events also publishes the merged event stream (nats, mqtt): every
	// event the hub applied, once, with its id device/stream/seq.
	Events bool
	// Topic prefixes the mqtt sink's topics: Topic/<metric> for window
	// updates, Topic/events for events. Default edgeflow/sink/<name>.
	Topic string
	// Stream is the JetStream stream the nats sink publishes to, created
	// (subjects Subject.>) when absent. Default EDGEFLOW_SINKS.
	Stream string
	// Subject prefixes the nats sink's subjects: Subject.<metric>.
	// Default edgeflow.sink.<name>.
	Subject string
}

// configKeys are the keys a sink entry may set, by kind ("" is every kind).
var configKeys = map[string][]string{
	"":                  {"name", "kind", "positions_table", "batch_entries", "poll_interval", "max_backoff"},
	KindPostgresWindows: {"dsn", "table", "metrics", "windows", "group_by", "quantiles", "provisional"},
	KindPostgresEvents:  {"dsn", "table"},
	KindNATS:            {"url", "stream", "subject", "metrics", "windows", "group_by", "quantiles", "provisional", "events"},
	KindMQTT:            {"url", "topic", "metrics", "windows", "group_by", "quantiles", "provisional", "events"},
}

// eventsToken is the subject token (nats) or topic level (mqtt) the merged
// event stream is published under; no metric of such a sink may have it.
const eventsToken = "events"

// quantileNames are the quantile columns a windows table may have.
var quantileNames = []string{"p50", "p95", "p99"}

// Parse reads the hub's `sinks:` section as viper (or a YAML decoder)
// returns it: a list of maps. nil or "" is no sinks. Every sink is checked
// (Validate); the first bad one is an ErrInvalidConfig naming the sink and
// the key.
func Parse(raw any) ([]Config, error) {
	return confval.NamedList(raw, confval.ListSpec{Key: "sinks", Item: "sink", Kind: "a sink", Among: "sinks",
		MapKeys: "name, kind, dsn, table, ...", Kinds: kinds, Keys: configKeys, Invalid: ErrInvalidConfig}, parseOne)
}

// parseOne reads one entry of the list past its name, kind and keys.
func parseOne(e confval.Entry) (Config, error) {
	c := Config{Name: e.Name, Kind: e.Kind}
	m, bad := e.M, e.Bad
	var err error
	if err = e.Strings(confval.StringField{Key: "dsn", Dst: &c.DSN}, confval.StringField{Key: "table", Dst: &c.Table},
		confval.StringField{Key: "positions_table", Dst: &c.PositionsTable}, confval.StringField{Key: "url", Dst: &c.URL},
		confval.StringField{Key: "stream", Dst: &c.Stream}, confval.StringField{Key: "subject", Dst: &c.Subject},
		confval.StringField{Key: "topic", Dst: &c.Topic}); err != nil {
		return c, err
	}
	for _, f := range []struct {
		key string
		dst *[]string
	}{{"metrics", &c.Metrics}, {"windows", &c.Windows}, {"group_by", &c.GroupBy}, {"quantiles", &c.Quantiles}} {
		if v, ok := m[f.key]; ok {
			s, err := cast.ToStringSliceE(v)
			if err != nil {
				return c, bad(f.key, "not a list of strings")
			}
			*f.dst = s
		}
	}
	for _, f := range []struct {
		key string
		dst *bool
	}{{"provisional", &c.Provisional}, {"events", &c.Events}} {
		if v, ok := m[f.key]; ok {
			if *f.dst, err = cast.ToBoolE(v); err != nil {
				return c, bad(f.key, "not true or false")
			}
		}
	}
	if v, ok := m["batch_entries"]; ok {
		if c.BatchEntries, err = cast.ToIntE(v); err != nil || c.BatchEntries <= 0 {
			return c, bad("batch_entries", "want a positive number of log entries per transaction")
		}
	}
	for _, f := range []struct {
		key string
		dst *time.Duration
	}{{"poll_interval", &c.PollInterval}, {"max_backoff", &c.MaxBackoff}} {
		if v, ok := m[f.key]; ok {
			d, err := confval.Duration(v)
			if err != nil || d <= 0 {
				return c, bad(f.key, "want a positive duration such as 200ms")
			}
			*f.dst = d
		}
	}
	c.EnsureDefaults()
	return c, c.Validate()
}

// EnsureDefaults fills the zero fields with their defaults.
func (c *Config) EnsureDefaults() {
	if c.PositionsTable == "" {
		c.PositionsTable = "edgeflow_sink_positions"
	}
	if c.Kind == KindNATS {
		if c.Stream == "" {
			c.Stream = "EDGEFLOW_SINKS"
		}
		if c.Subject == "" {
			c.Subject = "edgeflow.sink." + c.Name
		}
	}
	if c.Kind == KindMQTT && c.Topic == "" {
		c.Topic = "edgeflow/sink/" + c.Name
	}
	if c.BatchEntries == 0 {
		c.BatchEntries = 512
	}
	if c.PollInterval == 0 {
		c.PollInterval = 200 * time.Millisecond
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = 10 * time.Second
	}
}

// Validate checks c; an error is ErrInvalidConfig naming the sink and the
// key.
func (c *Config) Validate() error {
	bad := func(key, format string, a ...any) error {
		return fmt.Errorf("%w: sink %q: key %q: %s", ErrInvalidConfig, c.Name, key, fmt.Sprintf(format, a...))
	}
	if c.Name == "" {
		return bad("name", "is required")
	}
	switch c.Kind {
	case KindNATS:
		return c.validateNATS(bad)
	case KindMQTT:
		return c.validateMQTT(bad)
	case KindPostgresWindows, KindPostgresEvents:
	default:
		return bad("kind", "%q is not a sink kind (kinds: %s)", c.Kind, kinds)
	}
	if c.DSN == "" {
		return bad("dsn", "is required (e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable)")
	}
	if strings.Contains(c.DSN, "://") {
		if _, err := url.Parse(c.DSN); err != nil {
			return bad("dsn", "not a URL: %v", err)
		}
	}
	for key, t := range map[string]string{"table": c.Table, "positions_table": c.PositionsTable} {
		if _, err := splitTable(t); err != nil {
			return bad(key, "%v", err)
		}
	}
	if c.Table == c.PositionsTable {
		return bad("positions_table", "must differ from table %q", c.Table)
	}
	if c.BatchEntries <= 0 {
		return bad("batch_entries", "want a positive number, got %d", c.BatchEntries)
	}
	if c.Kind == KindPostgresEvents {
		return nil
	}
	return c.validateWindows(bad)
}

// validateNATS checks the keys of a nats sink.
func (c *Config) validateNATS(bad func(key, format string, a ...any) error) error {
	if c.URL == "" {
		return bad("url", "is required (e.g. nats://127.0.0.1:4222)")
	}
	if strings.ContainsAny(c.Stream, " .*>") || c.Stream == "" {
		return bad("stream", "%q is not a JetStream stream name", c.Stream)
	}
	if strings.ContainsAny(c.Subject, " *>") || strings.HasSuffix(c.Subject, ".") || c.Subject == "" {
		return bad("subject", "%q is not a subject prefix (no wildcards, no trailing dot)", c.Subject)
	}
	if strings.Trim(c.Name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") != "" {
		return bad("name", "%q: a nats sink's name is its key in the positions bucket: letters, digits, - and _ only", c.Name)
	}
	for _, m := range c.Metrics {
		if m == "" || strings.ContainsAny(m, " *>.") {
			return bad("metrics", "%q cannot be a subject token (no spaces, dots or wildcards)", m)
		}
		if c.Events && m == eventsToken {
			return bad("metrics", "%q: with events: true the subject %s.%s carries the event stream", m, c.Subject, eventsToken)
		}
	}
	if strings.ContainsAny(c.PositionsTable, " .*>") {
		return bad("positions_table", "%q is not a key-value bucket name (the nats sink keeps its position there)", c.PositionsTable)
	}
	return c.validateWindows(bad)
}

// maxTopicBytes bounds the mqtt sink's topic prefix: MQTT allows 65,535
// bytes per topic, and the metric (or the position's sink name) follows.
const maxTopicBytes = 1024

// validateMQTT checks the keys of an mqtt sink.
func (c *Config) validateMQTT(bad func(key, format string, a ...any) error) error {
	if c.URL == "" {
		return bad("url", "is required (e.g. tcp://127.0.0.1:1883)")
	}
	u, err := url.Parse(c.URL)
	if err != nil || u.Host == "" {
		return bad("url", "%q is not a broker URL such as tcp://host:1883", c.URL)
	}
	switch u.Scheme {
	case "tcp", "mqtt", "ssl", "tls", "mqtts", "ws", "wss":
	default:
		return bad("url", "%q: scheme %q is not tcp, ssl, tls, mqtt, mqtts, ws or wss", c.URL, u.Scheme)
	}
	for key, t := range map[string]string{"topic": c.Topic, "positions_table": c.PositionsTable} {
		if err := checkTopicPrefix(t); err != nil {
			return bad(key, "%q %v", t, err)
		}
	}
	if strings.Contains(c.Name, "/") || strings.ContainsAny(c.Name, "+#\x00") {
		return bad("name", "%q: an mqtt sink's name is a topic level of its position: no /, + or #", c.Name)
	}
	for _, m := range c.Metrics {
		if m == "" || strings.ContainsAny(m, "/+#\x00") {
			return bad("metrics", "%q cannot be a topic level (no /, + or #)", m)
		}
		if c.Events && m == eventsToken {
			return bad("metrics", "%q: with events: true the topic %s/%s carries the event stream", m, c.Topic, eventsToken)
		}
	}
	return c.validateWindows(bad)
}

// checkTopicPrefix checks an MQTT topic prefix: levels without wildcards,
// no trailing or doubled slash, not a $ (broker) topic, bounded length.
func checkTopicPrefix(t string) error {
	switch {
	case t == "":
		return errors.New("is empty")
	case len(t) > maxTopicBytes:
		return fmt.Errorf("is longer than %d bytes", maxTopicBytes)
	case strings.ContainsAny(t, "+#\x00"):
		return errors.New("is not a topic prefix: no wildcards (+, #) or NUL")
	case strings.HasPrefix(t, "$"):
		return errors.New("is not a topic prefix: topics starting with $ are the broker's")
	case strings.HasPrefix(t, "/") || strings.HasSuffix(t, "/") || strings.Contains(t, "//"):
		return errors.New("is not a topic prefix: no leading, trailing or empty level (/)")
	}
	return nil
}

// validateWindows checks the window keys of a postgres_windows, nats or
// mqtt sink.
func (c *Config) validateWindows(bad func(key, format string, a ...any) error) error {
	if len(c.Metrics) == 0 {
		return bad("metrics", "is required: the metrics whose windows the table holds")
	}
	if i := slices.Index(c.Metrics, ""); i >= 0 {
		return bad("metrics", "entry %d is empty", i)
	}
	if len(c.Windows) == 0 {
		return bad("windows", "is required: e.g. [tumbling:1m]")
	}
	for _, w := range c.Windows {
		if w == "" {
			return bad("windows", "an entry is empty")
		}
		if !strings.Contains(w, ":") {
			continue // a configured window's name, checked against the engine at start
		}
		spec, err := aggregate.ParseWindowSpec(w)
		if err != nil {
			return bad("windows", "%q: %v", w, err)
		}
		if spec.Kind == aggregate.Session && c.Kind != KindPostgresWindows {
			return bad("windows", "%q: %s", w, errSessionWindows)
		}
	}
	for _, g := range c.GroupBy {
		if g == "" {
			return bad("group_by", "an entry is empty")
		}
	}
	for _, q := range c.Quantiles {
		if !slices.Contains(quantileNames, q) {
			return bad("quantiles", "%q is not one of %s", q, strings.Join(quantileNames, ", "))
		}
	}
	return nil
}

// errSessionWindows is why the message sinks refuse session windows: a
// session's start changes when sessions merge, and a message already
// published under the old start cannot be taken back (postgres_windows
// deletes the merged-away rows in the step's transaction).
const errSessionWindows = "session windows are supported by postgres_windows only: a session's start changes when sessions merge, " +
	"and a message published under the old start cannot be taken back; use tumbling, hopping or sliding windows"

// splitTable reads "table" or "schema.table" into its parts (schema ""
// for the connection's search path).
func splitTable(s string) ([]string, error) {
	if s == "" {
		return nil, errors.New("is required (a table name, optionally schema.table)")
	}
	parts := strings.Split(s, ".")
	if len(parts) > 2 {
		return nil, fmt.Errorf("%q: want table or schema.table", s)
	}
	for _, p := range parts {
		if p == "" || len(p) > 63 {
			return nil, fmt.Errorf("%q: empty name or longer than 63 bytes", s)
		}
	}
	return parts, nil
}
