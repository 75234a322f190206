// Package natsbus is the hub's transport in cluster mode: a connection to
// NATS servers whose MQTT listeners the devices use. It takes devices'
// status and time request messages from core NATS subscriptions and
// publishes acks and time responses as core NATS messages, which NATS
// delivers to the devices' MQTT subscriptions. Batches do not come through
// it: the hub reads them from the JetStream log (package natslog), so that
// only what the stream holds is ever acknowledged.
package natsbus

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"edgeflow/hub/broker"
	"edgeflow/internal/tlsconf"
)

// Options configure a Bus.
type Options struct {
	// URLs are the NATS servers (nats://host:4222, tls://...); the client
	// connects to one and fails over to the others. Required.
	URLs []string
	// CredsFile is a NATS credentials file (user JWT and nkey seed).
	CredsFile string
	// User and Password, or Token, authenticate without a credentials
	// file. At most one of CredsFile, User/Password and Token.
	User, Password, Token string
	// TLS turns TLS on when any file is set (else the URL's scheme
	// decides: tls:// asks for it).
	TLS tlsconf.Files
	// Name is the connection's name in the servers' monitoring.
	Name string
	// Timeout bounds connecting and each Publish's flush. Default 10s.
	Timeout time.Duration
	// Logger receives connection events. Default slog.Default().
	Logger *slog.Logger
}

// Subjects the hub subscribes to: every device's status and time
// requests (the MQTT topics edge/v1/+/status and edge/v1/+/time/req).
const (
	StatusSubjects  = "edge.v1.*.status"
	TimeReqSubjects = "edge.v1.*.time.req"
)

// Validate names the first invalid field.
func (o *Options) Validate() error {
	if len(o.URLs) == 0 {
		return errors.New("natsbus: URLs: at least one server required")
	}
	for _, u := range o.URLs {
		if err := checkURL(u); err != nil {
			return fmt.Errorf("natsbus: URLs: %w", err)
		}
	}
	n := 0
	for _, set := range []bool{o.CredsFile != "", o.User != "" || o.Password != "", o.Token != ""} {
		if set {
			n++
		}
	}
	switch {
	case n > 1:
		return errors.New("natsbus: CredsFile, User/Password and Token: set at most one way to authenticate")
	case (o.User == "") != (o.Password == ""):
		return errors.New("natsbus: User and Password go together")
	case (o.TLS.CertFile == "") != (o.TLS.KeyFile == ""):
		return errors.New("natsbus: TLS.CertFile and TLS.KeyFile go together")
	}
	return nil
}

// checkURL accepts what nats.go dials: nats://, tls://, ws:// or wss://
// host:port, credentials in it redacted from the error.
func checkURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return fmt.Errorf("%q is not scheme://host:port", redact(s))
	}
	switch u.Scheme {
	case "nats", "tls", "ws", "wss":
		return nil
	}
	return fmt.Errorf("%q: scheme %q, want nats, tls, ws or wss", redact(s), u.Scheme)
}

// redact drops a URL's password.
func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		if err != nil {
			return "(unparsable URL)"
		}
		return s
	}
	return u.Redacted()
}

// Bus is the hub's NATS connection, a broker.Transport.
type Bus struct {
	opts      Options
	nc        *nats.Conn
	log       *slog.Logger
	connected atomic.Bool
	mu        sync.Mutex
	subs      []*nats.Subscription
}

var _ broker.Transport = (*Bus)(nil)

// Dial creates the connection. It returns at once even when no server is
// reachable: the client keeps trying for ever with a growing delay (up to
// 5 s) and Connected says when it is up. Files (credentials, TLS) are
// read now, so a bad path fails here.
func Dial(o Options) (*Bus, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	b := &Bus{opts: o, log: o.Logger}
	nopts := []nats.Option{
		nats.Name(o.Name), nats.Timeout(o.Timeout), nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true),
		nats.CustomReconnectDelay(reconnectDelay),
		nats.ConnectHandler(func(nc *nats.Conn) {
			b.connected.Store(true)
			b.log.Info("NATS connected", "server", nc.ConnectedUrlRedacted())
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			b.connected.Store(true)
			b.log.Info("NATS reconnected", "server", nc.ConnectedUrlRedacted())
		}),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			b.connected.Store(false)
			if nc.IsClosed() {
				return // Close, not a lost connection
			}
			b.log.Warn("NATS disconnected; reconnecting (nothing is read from the log or acknowledged meanwhile)", "err", err)
		}),
		nats.ClosedHandler(func(*nats.Conn) { b.connected.Store(false) }),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subj := ""
			if sub != nil {
				subj = sub.Subject
			}
			b.log.Warn("NATS error", "subject", subj, "err", err)
		}),
	}
	switch {
	case o.CredsFile != "":
		nopts = append(nopts, nats.UserCredentials(o.CredsFile))
	case o.User != "":
		nopts = append(nopts, nats.UserInfo(o.User, o.Password))
	case o.Token != "":
		nopts = append(nopts, nats.Token(o.Token))
	}
	if o.TLS.Enabled() {
		cfg, err := o.TLS.Config()
		if err != nil {
			return nil, fmt.Errorf("natsbus: %w", err)
		}
		nopts = append(nopts, nats.Secure(cfg))
	}
	nc, err := nats.Connect(strings.Join(o.URLs, ","), nopts...)
	if err != nil {
		return nil, fmt.Errorf("natsbus: connect %s: %w", redactAll(o.URLs), err)
	}
	b.nc = nc
	b.connected.Store(nc.IsConnected())
	return b, nil
}

// reconnectDelay grows from 100 ms by half each attempt up to 5 s.
func reconnectDelay(attempts int) time.Duration {
	d := 100 * time.Millisecond
	for i := 1; i < attempts && d < 5*time.Second; i++ {
		d += d / 2
	}
	return min(d, 5*time.Second)
}

// redactAll joins redacted URLs.
func redactAll(urls []string) string {
	out := make([]string, len(urls))
	for i, u := range urls {
		out[i] = redact(u)
	}
	return strings.Join(out, ",")
}

// Conn returns the connection, for the JetStream log.
func (b *Bus) Conn() *nats.Conn { return b.nc }

// Start subscribes to devices' statuses and time requests and hands each
// to h under its MQTT topic.
func (b *Bus) Start(h broker.MessageHandler) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, subj := range []string{StatusSubjects, TimeReqSubjects} {
		sub, err := b.nc.Subscribe(subj, func(m *nats.Msg) {
			topic, err := SubjectToTopic(m.Subject)
			if err != nil {
				b.log.Debug("NATS message on an unmappable subject", "subject", m.Subject, "err", err)
				return
			}
			h(topic, m.Data)
		})
		if err != nil {
			return fmt.Errorf("natsbus: subscribe %s: %w", subj, err)
		}
		b.subs = append(b.subs, sub)
	}
	return nil
}

// Publish sends msgs as core NATS messages on the subjects of their MQTT
// topics and waits, bounded by Options.Timeout, for the server's answer to
// a ping behind them. NATS delivers them to MQTT subscribers at QoS 0
// whatever Message.AtMostOnce says. While disconnected it fails at once
// instead of queueing: agents resend what stays unanswered.
func (b *Bus) Publish(msgs []broker.Message) error {
	if !b.nc.IsConnected() {
		return errors.New("natsbus: not connected")
	}
	for _, m := range msgs {
		subj, err := TopicToSubject(m.Topic)
		if err != nil {
			return err
		}
		if err := b.nc.Publish(subj, m.Payload); err != nil {
			return fmt.Errorf("natsbus: publish %s: %w", subj, err)
		}
	}
	if err := b.nc.FlushTimeout(b.opts.Timeout); err != nil {
		return fmt.Errorf("natsbus: flush: %w", err)
	}
	return nil
}

// Connected reports whether the connection is up.
func (b *Bus) Connected() bool { return b.connected.Load() && b.nc.IsConnected() }

// Pause ends the subscriptions.
func (b *Bus) Pause() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, s := range b.subs {
		_ = s.Unsubscribe()
	}
	b.subs = nil
}

// Close flushes what was published and closes the connection.
func (b *Bus) Close() error {
	b.Pause()
	if b.nc.IsConnected() {
		_ = b.nc.FlushTimeout(b.opts.Timeout)
	}
	b.nc.Close()
	return nil
}

// maxTopicBytes bounds a topic or subject this package maps.
const maxTopicBytes = 1024

// TopicToSubject maps an MQTT topic to the NATS subject NATS' MQTT
// listener uses for it: levels become tokens, a '.' in a level becomes
// "//". Empty levels, wildcards and whitespace are refused.
func TopicToSubject(topic string) (string, error) {
	if len(topic) == 0 || len(topic) > maxTopicBytes {
		return "", fmt.Errorf("natsbus: topic of %d bytes: want 1..%d", len(topic), maxTopicBytes)
	}
	levels := strings.Split(topic, "/")
	for i, l := range levels {
		if l == "" || strings.ContainsAny(l, "+#*> \t\r\n") {
			return "", fmt.Errorf("natsbus: topic %q: level %d cannot be a NATS token", topic, i)
		}
		levels[i] = strings.ReplaceAll(l, ".", "//")
	}
	return strings.Join(levels, "."), nil
}

// SubjectToTopic reverses TopicToSubject.
func SubjectToTopic(subject string) (string, error) {
	if len(subject) == 0 || len(subject) > maxTopicBytes {
		return "", fmt.Errorf("natsbus: subject of %d bytes: want 1..%d", len(subject), maxTopicBytes)
	}
	tokens := strings.Split(subject, ".")
	for i, t := range tokens {
		l := strings.ReplaceAll(t, "//", ".")
		if t == "" || strings.Contains(l, "/") {
			return "", fmt.Errorf("natsbus: subject %q: token %d cannot be a topic level", subject, i)
		}
		tokens[i] = l
	}
	return strings.Join(tokens, "/"), nil
}
