package hub

import (
	"fmt"
	"log/slog"
	"sync/atomic"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/auth"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"
)

// embeddedBroker is the Transport of a hub that runs its own MQTT broker
// (mochi-mqtt). The hub talks to it through the broker's inline client:
// no TCP loop-back, and an incoming batch is handed to the hub on the
// sending client's goroutine, so a busy hub slows that sender's reads.
type embeddedBroker struct {
	srv    *mqtt.Server
	tcp    *listeners.TCP
	subs   [3]string
	paused atomic.Bool
	log    *slog.Logger
}

// Inline subscription ids.
const (
	subBatches = iota + 1
	subStatus
	subTimeReqs
)

// NewEmbeddedBroker starts an MQTT broker listening on addr (host:port;
// port 0 picks a free one, see Addr). It accepts anonymous clients and
// packets up to maxPacket bytes (0: unlimited).
func NewEmbeddedBroker(addr string, maxPacket uint32, log *slog.Logger) (Transport, error) {
	caps := mqtt.NewDefaultServerCapabilities()
	caps.MaximumPacketSize = maxPacket
	srv := mqtt.New(&mqtt.Options{
		InlineClient: true,
		Capabilities: caps,
		Logger:       slog.New(minLevel{log.Handler(), slog.LevelWarn}).With("component", "broker"),
	})
	if err := srv.AddHook(new(auth.AllowHook), nil); err != nil {
		return nil, fmt.Errorf("embedded broker: %w", err)
	}
	tcp := listeners.NewTCP(listeners.Config{ID: "tcp", Address: addr})
	if err := srv.AddListener(tcp); err != nil {
		return nil, fmt.Errorf("embedded broker listen %s: %w", addr, err)
	}
	if err := srv.Serve(); err != nil {
		return nil, fmt.Errorf("embedded broker: %w", err)
	}
	b, s, t := subscriptions("")
	return &embeddedBroker{srv: srv, tcp: tcp, subs: [3]string{b, s, t}, log: log}, nil
}

// Addr returns the address the broker listens on.
func (e *embeddedBroker) Addr() string { return e.tcp.Address() }

// Start subscribes the inline client.
func (e *embeddedBroker) Start(h MessageHandler) error {
	fn := func(_ *mqtt.Client, _ packets.Subscription, pk packets.Packet) {
		if !e.paused.Load() {
			h(pk.TopicName, pk.Payload)
		}
	}
	for i, f := range e.subs {
		if err := e.srv.Subscribe(f, i+1, fn); err != nil {
			return fmt.Errorf("embedded broker subscribe %s: %w", f, err)
		}
	}
	return nil
}

// Publish hands msgs to the broker, which queues them for the subscribers.
func (e *embeddedBroker) Publish(msgs []Message) error {
	for _, m := range msgs {
		if err := e.srv.Publish(m.Topic, m.Payload, false, 1); err != nil {
			return fmt.Errorf("publish %s: %w", m.Topic, err)
		}
	}
	return nil
}

// Connected is always true: the broker is in the process.
func (e *embeddedBroker) Connected() bool { return true }

// Pause unsubscribes the inline client.
func (e *embeddedBroker) Pause() {
	e.paused.Store(true)
	for i, f := range e.subs {
		_ = e.srv.Unsubscribe(f, i+1)
	}
}

// Close stops the broker and disconnects its clients.
func (e *embeddedBroker) Close() error { return e.srv.Close() }

// brokerAddr is implemented by transports that listen themselves.
type brokerAddr interface{ Addr() string }
