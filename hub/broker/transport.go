package broker

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"syscall"

	"edgeflow/wire"
)

// Message is one outgoing MQTT message (not retained).
type Message struct {
	Topic   string
	Payload []byte
	// AtMostOnce publishes at QoS 0: the broker takes it without a PUBACK
	// and drops it for a client that is offline. Default QoS 1.
	AtMostOnce bool
}

// qos is the MQTT QoS m is published at.
func (m Message) qos() byte {
	if m.AtMostOnce {
		return 0
	}
	return 1
}

// MessageHandler receives one incoming message. Transports may call it from
// many goroutines at once; it may block to push back on a fast sender.
type MessageHandler func(topic string, payload []byte)

// Transport connects the hub to devices through an MQTT broker: the
// embedded one (NewSecureEmbeddedBroker) or an external one (NewExternalBroker).
type Transport interface {
	// Start subscribes to batches, status and time requests and delivers
	// them to h until Pause or Close.
	Start(h MessageHandler) error
	// Publish sends msgs (QoS 1 unless a Message says otherwise) and waits,
	// bounded, until the broker has taken them.
	Publish(msgs []Message) error
	// Connected reports whether the broker connection is up.
	Connected() bool
	// Pause stops delivering messages to h; messages not delivered are left
	// to the agents' redelivery (or to the broker's session).
	Pause()
	// Close disconnects and, for the embedded broker, stops it.
	Close() error
}

// subscriptions are the topic filters the hub listens to. Batches and time
// requests go through a shared subscription when group is set; statuses go
// to every hub.
func subscriptions(group string) (batches, status, timeReqs string) {
	batches, status, timeReqs = wire.AllBatches, wire.AllStatus, wire.AllTimeReqs
	if group != "" {
		batches = "$share/" + group + "/" + batches
		timeReqs = "$share/" + group + "/" + timeReqs
	}
	return batches, status, timeReqs
}

// minLevel wraps a slog.Handler to drop records below a level; the
// brokers' per-connection info logs would flood the hub's log.
type minLevel struct {
	slog.Handler
	min slog.Level
}

// Enabled reports whether l is at least the minimum and the inner handler
// takes it.
func (m minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= m.min && m.Handler.Enabled(ctx, l)
}

// Handle drops the broker's packet dumps (attribute "pk"): a dump of a
// CONNECT holds the device's password, and any dump may hold a payload.
// Mochi's listeners log the end of each connection that ended in an error
// as a warning without a message; such a record gets one, and a connection
// that ended as devices' connections do (closed or reset by the peer
// without a DISCONNECT: power or link lost) is taken down to debug, below
// the minimum, so a fleet's power cut does not fill the log. The will and
// the device registry say the device went away.
func (m minLevel) Handle(ctx context.Context, r slog.Record) error {
	level, msg := r.Level, r.Message
	if msg == "" {
		msg = "client connection ended"
		r.Attrs(func(a slog.Attr) bool {
			if err, ok := a.Value.Any().(error); ok && a.Key == "error" && peerWentAway(err) {
				level = slog.LevelDebug
			}
			return true
		})
		if level < m.min || !m.Handler.Enabled(ctx, level) {
			return nil
		}
	}
	clean := slog.NewRecord(r.Time, level, msg, r.PC)
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "pk" {
			a = slog.String("pk", "(not logged)")
		}
		clean.AddAttrs(a)
		return true
	})
	return m.Handler.Handle(ctx, clean)
}

// peerWentAway reports whether err is how a connection ends when its
// peer closes or resets it (or the broker closed it itself).
func peerWentAway(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed)
}

// WithAttrs keeps the minimum.
func (m minLevel) WithAttrs(a []slog.Attr) slog.Handler {
	return minLevel{m.Handler.WithAttrs(a), m.min}
}

// WithGroup keeps the minimum.
func (m minLevel) WithGroup(name string) slog.Handler {
	return minLevel{m.Handler.WithGroup(name), m.min}
}
