package broker

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"edgeflow/internal/mqttdial"
	"edgeflow/internal/tlsconf"
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
	// TLS configures TLS to the broker: on when any of its fields is set
	// (a tcp:// or mqtt:// URL is then dialled as ssl://, ws:// as wss://)
	// or the URL is ssl://, tls://, mqtts:// or wss://.
	TLS ExternalTLS
	// Group subscribes to batches and time requests through $share/Group/.
	Group string
	// Timeout bounds connect, subscribe and every publish. Required.
	Timeout time.Duration
	// Logger receives connection events. Required.
	Logger *slog.Logger
}

// ExternalTLS configures TLS to an external broker, as the agent's
// uplink.TLSOptions do.
type ExternalTLS struct {
	// CAFile is a PEM bundle of the CAs that sign the broker's certificate.
	// Default: the system roots.
	CAFile string
	// CertFile and KeyFile are the hub's PEM client certificate and key for
	// mutual TLS. Both or neither.
	CertFile, KeyFile string
	// ServerName overrides the name checked against the broker's
	// certificate. Default: the host of the broker URL.
	ServerName string
}

func (t ExternalTLS) enabled() bool {
	return tlsconf.Files(t).Enabled()
}

// config builds the tls.Config, reading the files; errors name the file,
// which holds no secret (a key file's content never appears).
func (t ExternalTLS) config() (*tls.Config, error) {
	c, err := tlsconf.Files(t).Config()
	if err != nil {
		return nil, fmt.Errorf("broker %w", err)
	}
	return c, nil
}

// tlsURL returns the broker URL with a TLS scheme when TLS is configured
// on a plain one.
func tlsURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	switch u.Scheme {
	case "tcp", "mqtt":
		u.Scheme = "ssl"
	case "ws":
		u.Scheme = "wss"
	}
	return u.String()
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
	tlsErr    error // a TLS file that could not be loaded; Start returns it
	handler   atomic.Pointer[MessageHandler]
	paused    atomic.Bool
	subscribe sync.Mutex
	// subscribed is set once the subscriptions of the current connection
	// are acknowledged: until then batches published would find no
	// subscriber (and be dropped by the broker), so the hub is not ready.
	subscribed atomic.Bool
	// conns counts connections, so a subscription retry of an older one
	// stops once a newer one subscribes for itself.
	conns     atomic.Uint64
	closed    chan struct{} // closed by Close; ends subscription retries and ackLoop
	closeOnce sync.Once
	// acks carries delivered messages to ackLoop, whose goroutine lives as
	// long as the broker and so keeps the stack paho's acknowledgement
	// needs (its store key is built with fmt): acknowledged in paho's
	// goroutine for the message, each grew a fresh stack, 2.8% of the CPU
	// end to end in a profile (E2E_CPUPROFILE), against 1.1% for ackLoop.
	acks chan paho.Message
}

// ackQueue bounds the messages delivered and waiting for ackLoop.
const ackQueue = 256

// Subscription retry: a refused or unanswered subscription is tried again
// after subscribeRetryMin, doubling to subscribeRetryMax, while the
// connection lasts.
const (
	subscribeRetryMin = time.Second
	subscribeRetryMax = 30 * time.Second
)

// NewExternalBroker prepares a paho client; Start connects it (and
// reports a TLS file that could not be loaded).
func NewExternalBroker(o ExternalOptions) Transport {
	e := &externalBroker{opts: o, closed: make(chan struct{}), acks: make(chan paho.Message, ackQueue)}
	broker := o.URL
	var tc *tls.Config
	if o.TLS.enabled() {
		tc, e.tlsErr = o.TLS.config()
		broker = tlsURL(o.URL)
	}
	co := paho.NewClientOptions().AddBroker(broker).SetClientID(o.ClientID).
		SetCleanSession(false).SetOrderMatters(false).SetAutoAckDisabled(true).
		SetAutoReconnect(true).SetConnectRetry(true).SetMaxReconnectInterval(10 * time.Second).
		SetConnectTimeout(o.Timeout).SetWriteTimeout(o.Timeout).SetKeepAlive(30 * time.Second).
		SetOnConnectHandler(e.onConnect).
		SetConnectionLostHandler(func(_ paho.Client, err error) {
			e.subscribed.Store(false)
			o.Logger.Warn("broker connection lost", "url", RedactURL(o.URL), "err", err)
		})
	if o.Username != "" {
		co.SetUsername(o.Username).SetPassword(o.Password)
	}
	if tc != nil {
		co.SetTLSConfig(tc)
	}
	if mqttdial.Handles([]string{broker}) {
		// Buffered reads: paho reads each packet with three to six read
		// calls otherwise (internal/mqttdial).
		co.SetCustomOpenConnectionFn(mqttdial.Open(nil, o.Timeout))
	}
	e.client = paho.NewClient(co)
	return e
}

// Start connects and subscribes. If the broker is not reachable within the
// timeout, Start returns nil and paho keeps trying; Connected says when.
func (e *externalBroker) Start(h MessageHandler) error {
	if e.tlsErr != nil {
		return e.tlsErr
	}
	e.handler.Store(&h)
	go e.ackLoop()
	tok := e.client.Connect()
	if !tok.WaitTimeout(e.opts.Timeout) {
		e.opts.Logger.Warn("broker not reachable yet, retrying in the background", "url", RedactURL(e.opts.URL))
		return nil
	}
	if err := tok.Error(); err != nil {
		return fmt.Errorf("connect %s: %w", RedactURL(e.opts.URL), err)
	}
	return nil
}

// onConnect (re)subscribes on every connection: cheap, and right even if
// the broker lost the hub's session. A subscription the broker refuses (an
// ACL that does not let the hub's user read the topic) or does not answer
// is retried in the background while the connection lasts; until it is in
// place the hub is not ready.
func (e *externalBroker) onConnect(c paho.Client) {
	conn := e.conns.Add(1)
	e.subscribed.Store(false)
	if !e.trySubscribe(c) {
		go e.retrySubscribe(c, conn)
	}
}

// trySubscribe subscribes once and reports whether every subscription is
// in place.
func (e *externalBroker) trySubscribe(c paho.Client) bool {
	e.subscribe.Lock()
	defer e.subscribe.Unlock()
	if err := e.subscribeAll(c); err != nil {
		e.opts.Logger.Error("subscribe failed: the hub is not ready and tries again", "url", RedactURL(e.opts.URL), "client_id", e.opts.ClientID, "err", err)
		return false
	}
	e.subscribed.Store(true)
	e.opts.Logger.Info("connected to broker", "url", RedactURL(e.opts.URL), "client_id", e.opts.ClientID)
	return true
}

// subscribeAll subscribes to the hub's topics and checks every grant: an
// MQTT 3.1.1 broker refuses one topic of a SUBSCRIBE with return code 0x80
// in an otherwise successful SUBACK, which paho does not report as an
// error.
func (e *externalBroker) subscribeAll(c paho.Client) error {
	b, s, t := subscriptions(e.opts.Group)
	tok := c.SubscribeMultiple(map[string]byte{b: 1, s: 1, t: 1}, e.deliver)
	if !tok.WaitTimeout(e.opts.Timeout) {
		return fmt.Errorf("no SUBACK within %v", e.opts.Timeout)
	}
	if err := tok.Error(); err != nil {
		return err
	}
	st, ok := tok.(*paho.SubscribeToken)
	if !ok {
		return nil
	}
	var refused []string
	for topic, code := range st.Result() {
		if code >= 0x80 {
			refused = append(refused, topic)
		}
	}
	if len(refused) > 0 {
		slices.Sort(refused)
		return fmt.Errorf("the broker refused the subscription to %s (SUBACK return code 0x80): check that its ACL lets the hub's user read these topics", strings.Join(refused, ", "))
	}
	return nil
}

// retrySubscribe tries the subscriptions of connection conn again, with
// backoff, until they are in place, the connection is gone or replaced,
// or the broker client is closed.
func (e *externalBroker) retrySubscribe(c paho.Client, conn uint64) {
	d := subscribeRetryMin
	for {
		t := time.NewTimer(d)
		select {
		case <-e.closed:
			t.Stop()
			return
		case <-t.C:
		}
		if e.conns.Load() != conn || !c.IsConnectionOpen() {
			return // the next connection's onConnect subscribes
		}
		if e.trySubscribe(c) {
			return
		}
		d = min(2*d, subscribeRetryMax)
	}
}

// deliver hands a message to the hub and then acknowledges it.
func (e *externalBroker) deliver(_ paho.Client, m paho.Message) {
	h := e.handler.Load()
	if h == nil || e.paused.Load() {
		return
	}
	(*h)(m.Topic(), m.Payload())
	select {
	case e.acks <- m:
	case <-e.closed: // not acknowledged: the broker delivers it again
	}
}

// ackLoop acknowledges delivered messages, in the order the hub took
// them, until Close, and then those already queued (paho drops an
// acknowledgement that comes after its connection is gone).
func (e *externalBroker) ackLoop() {
	for {
		select {
		case m := <-e.acks:
			m.Ack()
		case <-e.closed:
			for len(e.acks) > 0 { // ackLoop is the only receiver
				(<-e.acks).Ack()
			}
			return
		}
	}
}

// Publish publishes every message, then waits for all PUBACKs within one
// timeout.
func (e *externalBroker) Publish(msgs []Message) error {
	toks := make([]paho.Token, len(msgs))
	for i, m := range msgs {
		toks[i] = e.client.Publish(m.Topic, m.qos(), false, m.Payload)
	}
	deadline := time.Now().Add(e.opts.Timeout)
	var errs []error
	for i, t := range toks {
		// A token already done (a QoS 0 ack is, once written) needs no
		// timer: WaitTimeout makes one per call.
		if !isDone(t) && !t.WaitTimeout(time.Until(deadline)) {
			errs = append(errs, fmt.Errorf("publish %s: no PUBACK within %v", msgs[i].Topic, e.opts.Timeout))
			continue
		}
		if err := t.Error(); err != nil {
			errs = append(errs, fmt.Errorf("publish %s: %w", msgs[i].Topic, err))
		}
	}
	return errors.Join(errs...)
}

// isDone reports whether t has completed, without waiting.
func isDone(t paho.Token) bool {
	select {
	case <-t.Done():
		return true
	default:
		return false
	}
}

// Connected reports whether paho's connection is open and the hub's
// subscriptions on it are in place.
func (e *externalBroker) Connected() bool { return e.client.IsConnectionOpen() && e.subscribed.Load() }

// Pause stops taking messages; they stay unacknowledged in the session.
func (e *externalBroker) Pause() { e.paused.Store(true) }

// Close disconnects, giving in-flight work a moment.
func (e *externalBroker) Close() error {
	e.paused.Store(true)
	e.closeOnce.Do(func() { close(e.closed) })
	e.client.Disconnect(250)
	return nil
}

// redactURL hides a password in a broker URL (tcp://user:pass@host) for
// logs and errors. A URL it cannot take apart, or one without // (such as
// user:pass@host:1883, which parses as scheme "user"), may hold a password
// anywhere, so it is not shown at all.
func RedactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.Opaque != "" {
		return "(unparsable broker url)"
	}
	return u.Redacted()
}
