package broker

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/prometheus/client_golang/prometheus"
)

// Embedded is the Transport of a hub that runs its own MQTT broker
// (mochi-mqtt). The hub talks to it through the broker's inline client:
// no TCP loop-back, and an incoming batch is handed to the hub on the
// sending client's goroutine, so a busy hub slows that sender's reads.
type Embedded struct {
	srv    *mqtt.Server
	tcp    listeners.Listener
	subs   [3]string
	paused atomic.Bool
	log    *slog.Logger
	auth   *deviceAuth
	direct *handoff
}

// The inline subscription ids are 1, 2 and 3: the index in subs plus 1.

// defaultClientQueue and maxClientQueue are the default and the bound of
// Options.MQTTClientQueue.
const (
	DefaultClientQueue = 1024
	maxClientQueue     = 1 << 20
)

// EmbeddedOptions configure the embedded broker.
type EmbeddedOptions struct {
	// Addr is the listen address (host:port; port 0 picks a free one).
	Addr string
	// Listener, when set, is an already bound listener the broker serves
	// instead of listening on Addr (a hub binds it before it opens its
	// store); the broker closes it. Security.TLS applies to it as to Addr.
	Listener net.Listener
	// MaxPacket bounds a packet in bytes; 0: unlimited.
	MaxPacket uint32
	// ClientQueue bounds the messages queued for one client (see
	// Options.MQTTClientQueue); 0: defaultClientQueue.
	ClientQueue int
	// Security is who may connect and what each device may do.
	Security BrokerSecurity
	// Registerer receives the broker's metrics. Nil: none.
	Registerer prometheus.Registerer
	// Logger receives the broker's warnings. Required.
	Logger *slog.Logger
}

// NewSecureEmbeddedBroker starts the embedded broker with o.Security: see
// BrokerSecurity.
func NewSecureEmbeddedBroker(o EmbeddedOptions) (Transport, error) {
	caps := mqtt.NewDefaultServerCapabilities()
	caps.MaximumPacketSize = o.MaxPacket
	caps.MaximumClientWritesPending = DefaultClientQueue
	if o.ClientQueue > 0 {
		caps.MaximumClientWritesPending = int32(min(o.ClientQueue, maxClientQueue))
	}
	srv := mqtt.New(&mqtt.Options{
		InlineClient: true,
		Capabilities: caps,
		Logger:       slog.New(minLevel{o.Logger.Handler(), slog.LevelWarn}).With("component", "broker"),
	})
	blog := o.Logger.With("component", "broker")
	auth := newDeviceAuth(o.Security, nil, blog)
	auth.srv = srv
	e := &Embedded{srv: srv, log: o.Logger, auth: auth}
	e.direct = newHandoff(e)
	retain := &retainGuard{maxBytes: o.Security.MaxRetainedBytes, log: newBrokerLog(blog, auth.thr.o.Now)}
	if retain.maxBytes <= 0 {
		retain.maxBytes = DefaultMaxRetainedBytes
	}
	if o.Registerer != nil {
		m, err := newBrokerMetrics(o.Registerer, auth.connections, e.direct, auth.thr)
		if err != nil {
			return nil, fmt.Errorf("embedded broker metrics: %w", err)
		}
		auth.metrics, retain.refused = m, m.retained
	}
	// Order matters: the retain guard takes the retain flag off before the
	// handoff looks at it (it routes retained messages).
	for _, h := range []mqtt.Hook{auth, retain, e.direct} {
		if err := srv.AddHook(h, nil); err != nil {
			return nil, fmt.Errorf("embedded broker: %w", err)
		}
	}
	var tcp listeners.Listener = listeners.NewTCP(listeners.Config{ID: "tcp", Address: o.Addr, TLSConfig: o.Security.TLS})
	if o.Listener != nil {
		ln := o.Listener
		if o.Security.TLS != nil {
			ln = tls.NewListener(ln, o.Security.TLS)
		}
		tcp = listeners.NewNet("tcp", ln)
	}
	if err := srv.AddListener(tcp); err != nil {
		return nil, fmt.Errorf("embedded broker listen %s: %w", o.Addr, err)
	}
	if err := srv.Serve(); err != nil {
		return nil, fmt.Errorf("embedded broker: %w", err)
	}
	b, s, t := subscriptions("")
	e.tcp, e.subs = tcp, [3]string{b, s, t}
	return e, nil
}

// Addr returns the address the broker listens on.
func (e *Embedded) Addr() string { return e.tcp.Address() }

// Start subscribes the inline client.
func (e *Embedded) Start(h MessageHandler) error {
	return e.StartIdentified(func(topic, _ string, payload []byte) { h(topic, payload) })
}

// StartIdentified subscribes the inline client and passes each message's
// publisher identity (see BrokerSecurity) along with it.
func (e *Embedded) StartIdentified(h IdentifiedHandler) error {
	secure := e.auth.sec.enabled()
	fn := func(_ *mqtt.Client, _ packets.Subscription, pk packets.Packet) {
		if e.paused.Load() {
			return
		}
		id := ""
		if secure {
			id = e.auth.identityOf(pk.Origin)
		}
		h(pk.TopicName, id, pk.Payload)
	}
	for i, f := range e.subs {
		if err := e.srv.Subscribe(f, i+1, fn); err != nil {
			return fmt.Errorf("embedded broker subscribe %s: %w", f, err)
		}
	}
	e.direct.start(h)
	return nil
}

// Publish hands msgs to the broker, which queues them for the subscribers.
func (e *Embedded) Publish(msgs []Message) error {
	for _, m := range msgs {
		if err := e.srv.Publish(m.Topic, m.Payload, false, m.qos()); err != nil {
			return fmt.Errorf("publish %s: %w", m.Topic, err)
		}
	}
	return nil
}

// Connected is always true: the broker is in the process.
func (e *Embedded) Connected() bool { return true }

// Pause unsubscribes the inline client.
func (e *Embedded) Pause() {
	e.paused.Store(true)
	for i, f := range e.subs {
		_ = e.srv.Unsubscribe(f, i+1)
	}
}

// Revoke disconnects the connected clients that proved a password of one
// of devices, whose credentials a reload removed or changed (clients
// identified by a certificate keep their connection), and returns how
// many it disconnected. They may reconnect, and are then verified against
// the current credentials.
func (e *Embedded) Revoke(devices []string) int { return e.auth.revoke(devices) }

// Close stops the broker and disconnects its clients.
func (e *Embedded) Close() error { return e.srv.Close() }

// IdentifiedHandler receives one incoming message with the verified
// identity (device id) of the client that published it; identity is ""
// when the transport does not know it (anonymous clients, external
// brokers).
type IdentifiedHandler func(topic, identity string, payload []byte)

// identifiedTransport is a Transport that knows who published a message.
type IdentifiedTransport interface {
	StartIdentified(h IdentifiedHandler) error
}

// brokerAddr is implemented by transports that listen themselves.
type BrokerAddr interface{ Addr() string }
