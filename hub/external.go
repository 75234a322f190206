package hub

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// ExternalOptions configure the connection to an external broker.
type ExternalOptions struct {
	// URL is the broker, e.g. tcp://host:1883. Required.
	URL string
	// ClientID must be stable: with CleanSession=false the broker keeps the
	// hub's subscriptions and queues messages while it restarts. Required.
	ClientID string
	// Username and Password authenticate the hub. Default none.
	Username, Password string
	// Group subscribes to batches and time requests through $share/Group/.
	Group string
	// Timeout bounds connect, subscribe and every publish. Required.
	Timeout time.Duration
	// Logger receives connection events. Required.
	Logger *slog.Logger
}

// externalBroker is the Transport of a hub on an external broker, through
// paho. Handlers run unordered (each message on its own goroutine, so slow
// processing never stalls paho's keep-alives); the broker's in-flight
// window bounds how many run at once. Messages are acknowledged to the
// broker only once the hub has queued them, so messages a pausing hub
// refuses stay in its session.
type externalBroker struct {
	opts      ExternalOptions
	client    paho.Client
	handler   atomic.Pointer[MessageHandler]
	paused    atomic.Bool
	subscribe sync.Mutex
}

// NewExternalBroker prepares a paho client; Start connects it.
func NewExternalBroker(o ExternalOptions) Transport {
	e := &externalBroker{opts: o}
	co := paho.NewClientOptions().AddBroker(o.URL).SetClientID(o.ClientID).
		SetCleanSession(false).SetOrderMatters(false).SetAutoAckDisabled(true).
		SetAutoReconnect(true).SetConnectRetry(true).SetMaxReconnectInterval(10 * time.Second).
		SetConnectTimeout(o.Timeout).SetWriteTimeout(o.Timeout).SetKeepAlive(30 * time.Second).
		SetOnConnectHandler(e.onConnect).
		SetConnectionLostHandler(func(_ paho.Client, err error) {
			o.Logger.Warn("broker connection lost", "url", redactURL(o.URL), "err", err)
		})
	if o.Username != "" {
		co.SetUsername(o.Username).SetPassword(o.Password)
	}
	e.client = paho.NewClient(co)
	return e
}

// Start connects and subscribes. If the broker is not reachable within the
// timeout, Start returns nil and paho keeps trying; Connected says when.
func (e *externalBroker) Start(h MessageHandler) error {
	e.handler.Store(&h)
	tok := e.client.Connect()
	if !tok.WaitTimeout(e.opts.Timeout) {
		e.opts.Logger.Warn("broker not reachable yet, retrying in the background", "url", redactURL(e.opts.URL))
		return nil
	}
	if err := tok.Error(); err != nil {
		return fmt.Errorf("connect %s: %w", redactURL(e.opts.URL), err)
	}
	return nil
}

// onConnect (re)subscribes on every connection: cheap, and right even if
// the broker lost the hub's session.
func (e *externalBroker) onConnect(c paho.Client) {
	e.subscribe.Lock()
	defer e.subscribe.Unlock()
	b, s, t := subscriptions(e.opts.Group)
	tok := c.SubscribeMultiple(map[string]byte{b: 1, s: 1, t: 1}, e.deliver)
	if !tok.WaitTimeout(e.opts.Timeout) {
		e.opts.Logger.Error("subscribe timed out", "url", redactURL(e.opts.URL))
		return
	}
	if err := tok.Error(); err != nil {
		e.opts.Logger.Error("subscribe failed", "url", redactURL(e.opts.URL), "err", err)
		return
	}
	e.opts.Logger.Info("connected to broker", "url", redactURL(e.opts.URL), "client_id", e.opts.ClientID)
}

// deliver hands a message to the hub and then acknowledges it.
func (e *externalBroker) deliver(_ paho.Client, m paho.Message) {
	h := e.handler.Load()
	if h == nil || e.paused.Load() {
		return
	}
	(*h)(m.Topic(), m.Payload())
	m.Ack()
}

// Publish publishes every message, then waits for all PUBACKs within one
// timeout.
func (e *externalBroker) Publish(msgs []Message) error {
	toks := make([]paho.Token, len(msgs))
	for i, m := range msgs {
		toks[i] = e.client.Publish(m.Topic, 1, false, m.Payload)
	}
	deadline := time.Now().Add(e.opts.Timeout)
	var errs []error
	for i, t := range toks {
		if !t.WaitTimeout(time.Until(deadline)) {
			errs = append(errs, fmt.Errorf("publish %s: no PUBACK within %v", msgs[i].Topic, e.opts.Timeout))
			continue
		}
		if err := t.Error(); err != nil {
			errs = append(errs, fmt.Errorf("publish %s: %w", msgs[i].Topic, err))
		}
	}
	return errors.Join(errs...)
}

// Connected reports whether paho's connection is open.
func (e *externalBroker) Connected() bool { return e.client.IsConnectionOpen() }

// Pause stops taking messages; they stay unacknowledged in the session.
func (e *externalBroker) Pause() { e.paused.Store(true) }

// Close disconnects, giving in-flight work a moment.
func (e *externalBroker) Close() error {
	e.paused.Store(true)
	e.client.Disconnect(250)
	return nil
}

// redactURL hides a password in a broker URL (tcp://user:pass@host) for
// logs and errors.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable broker url)"
	}
	return u.Redacted()
}
