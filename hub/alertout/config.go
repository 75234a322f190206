package alertout

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cast"

	"edgeflow/internal/confval"
)

// Output kinds.
const (
	// KindWebhook POSTs each alert change to an HTTP(S) URL.
	KindWebhook = "webhook"
	// KindMQTT publishes each alert change on the hub's MQTT broker.
	KindMQTT = "mqtt"
)

// ErrInvalidConfig marks an output configuration the hub refuses; the
// message names the output and the key.
var ErrInvalidConfig = errors.New("invalid alert output")

// MaxOutputs bounds the alert_outputs list.
const MaxOutputs = 32

// Config is one entry of the hub's `alert_outputs:` list.
type Config struct {
	// Name identifies the output: its stored position, its metrics'
	// label. Unique among the outputs.
	Name string
	// Kind is KindWebhook or KindMQTT.
	Kind string
	// URL is the webhook's http:// or https:// URL.
	URL string
	// Headers are added to every webhook request (e.g. Authorization).
	Headers map[string]string
	// Timeout bounds one webhook request. Default 5s.
	Timeout time.Duration
	// Topic is the MQTT topic (no wildcards, not under the fleet's
	// edge/v1/ topics).
	Topic string
	// MaxBackoff bounds the wait between retries while the receiver
	// fails (the wait doubles from 100ms). Default 30s.
	MaxBackoff time.Duration
}

// configKeys are the keys an output may set, by kind ("" is every kind).
var configKeys = map[string][]string{
	"":          {"name", "kind", "max_backoff"},
	KindWebhook: {"url", "headers", "timeout"},
	KindMQTT:    {"topic"},
}

// fleetTopicPrefix is the root of the fleet's own topics (wire.TopicPrefix):
// alerts published there would reach the hub's ingest.
const fleetTopicPrefix = "edge/v1/"

// Parse reads the hub's `alert_outputs:` section as viper (or a YAML
// decoder) returns it: a list of maps. nil or "" is no outputs. Every
// output is checked; the first bad one is an ErrInvalidConfig naming the
// output and the key.
func Parse(raw any) ([]Config, error) {
	return confval.NamedList(raw, confval.ListSpec{Key: "alert_outputs", Item: "output", Kind: "an alert output",
		Among: "alert outputs", MapKeys: "name, kind, url, topic, ...", Kinds: KindWebhook + ", " + KindMQTT,
		Keys: configKeys, Max: MaxOutputs, Invalid: ErrInvalidConfig}, parseOne)
}

// parseOne reads one entry of the list past its name, kind and keys.
func parseOne(e confval.Entry) (Config, error) {
	c := Config{Name: e.Name, Kind: e.Kind}
	m, bad := e.M, e.Bad
	if err := e.Strings(confval.StringField{Key: "url", Dst: &c.URL}, confval.StringField{Key: "topic", Dst: &c.Topic}); err != nil {
		return c, err
	}
	if v, ok := m["headers"]; ok {
		h, err := cast.ToStringMapStringE(v)
		if err != nil {
			return c, bad("headers", "not a map of header names to strings")
		}
		c.Headers = h
	}
	for _, f := range []struct {
		key string
		dst *time.Duration
	}{{"timeout", &c.Timeout}, {"max_backoff", &c.MaxBackoff}} {
		if v, ok := m[f.key]; ok {
			d, err := confval.Duration(v)
			if err != nil || d <= 0 {
				return c, bad(f.key, "want a positive duration such as 5s")
			}
			*f.dst = d
		}
	}
	c.EnsureDefaults()
	if err := c.Validate(); err != nil {
		return c, fmt.Errorf("%w (alert_outputs[%d])", err, e.Index)
	}
	return c, nil
}

// EnsureDefaults fills the zero fields with their defaults.
func (c *Config) EnsureDefaults() {
	if c.Kind == KindWebhook && c.Timeout == 0 {
		c.Timeout = 5 * time.Second
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = 30 * time.Second
	}
}

// Validate checks c; an error is ErrInvalidConfig naming the output and
// the key.
func (c *Config) Validate() error {
	bad := func(key, format string, a ...any) error {
		return fmt.Errorf("%w: alert output %q: key %q: %s", ErrInvalidConfig, c.Name, key, fmt.Sprintf(format, a...))
	}
	switch {
	case c.Name == "":
		return bad("name", "is required")
	case len(c.Name) > 200 || strings.ContainsRune(c.Name, 0):
		return bad("name", "longer than 200 bytes or holds a 0 byte")
	case c.MaxBackoff <= 0:
		return bad("max_backoff", "want a positive duration")
	}
	switch c.Kind {
	case KindWebhook:
		u, err := url.Parse(c.URL)
		if c.URL == "" {
			return bad("url", "is required (e.g. https://alerts.example.com/hook)")
		}
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return bad("url", "%q is not an http:// or https:// URL", c.URL)
		}
		if c.Timeout <= 0 {
			return bad("timeout", "want a positive duration")
		}
		for k, v := range c.Headers {
			if !validHeaderName(k) {
				return bad("headers", "%q is not an HTTP header name", k)
			}
			if strings.ContainsAny(v, "\r\n\x00") {
				return bad("headers", "the value of %q holds a line break or a 0 byte", k)
			}
			if http.CanonicalHeaderKey(k) == "Idempotency-Key" || http.CanonicalHeaderKey(k) == "Content-Type" {
				return bad("headers", "%q is set by the output", k)
			}
		}
	case KindMQTT:
		if err := validTopic(c.Topic); err != nil {
			return bad("topic", "%v", err)
		}
	default:
		return bad("kind", "%q is not an alert output kind (kinds: %s, %s)", c.Kind, KindWebhook, KindMQTT)
	}
	return nil
}

// validTopic checks an MQTT topic to publish on.
func validTopic(t string) error {
	switch {
	case t == "":
		return errors.New("is required (e.g. edgeflow/alerts)")
	case len(t) > 65535 || !utf8.ValidString(t) || strings.ContainsRune(t, 0):
		return fmt.Errorf("%q is not a valid MQTT topic (UTF-8, no 0 byte, at most 65535 bytes)", t)
	case strings.ContainsAny(t, "+#"):
		return fmt.Errorf("%q holds a wildcard (+ or #): a publish needs a plain topic", t)
	case strings.HasPrefix(t, "$"):
		return fmt.Errorf("%q starts with $, reserved for the broker", t)
	case strings.HasPrefix(t, fleetTopicPrefix):
		return fmt.Errorf("%q is under %s, the fleet's own topics the hub ingests", t, fleetTopicPrefix)
	}
	return nil
}

// validHeaderName reports whether k is an HTTP token.
func validHeaderName(k string) bool {
	if k == "" {
		return false
	}
	for _, r := range k {
		if r > 127 || !(r == '!' || r == '#' || r == '$' || r == '%' || r == '&' || r == '\'' || r == '*' || r == '+' ||
			r == '-' || r == '.' || r == '^' || r == '_' || r == '`' || r == '|' || r == '~' ||
			r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return false
		}
	}
	return true
}
