package broker

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/prometheus/client_golang/prometheus"

	"edgeflow/internal/lograte"
	"edgeflow/wire"
)

// DefaultMaxRetainedBytes is the default bound of a retained message's
// payload on the embedded broker: a device's status (its retained online
// message and last will) is a few hundred bytes.
const DefaultMaxRetainedBytes = 4 << 10

// maxMaxRetainedBytes bounds Options.MQTTMaxRetainedBytes.
const maxMaxRetainedBytes = 1 << 20

// Why a retained message was refused.
const (
	retainNotStatus = "not_status_topic" // only edge/v1/{device}/status is retained
	retainTooLarge  = "too_large"        // payload beyond MaxRetainedBytes
)

// hubOnlyTopic reports whether only the hub may publish to topic: a
// device's ack or time response topic. A forged ack would make an agent
// delete events the hub never applied.
func hubOnlyTopic(topic string) bool {
	rest, ok := strings.CutPrefix(topic, wire.TopicPrefix)
	if !ok {
		return false
	}
	_, kind, ok := strings.Cut(rest, "/")
	return ok && (kind == wire.KindAck || kind == wire.KindTimeResp)
}

// retainRefusal says why a retained message of size bytes on topic is
// refused ("" if it is not). The broker keeps a retained message until it
// is replaced and hands it to every subscriber that comes, so it keeps
// only what the protocol retains: a device's status, within maxBytes.
func retainRefusal(topic string, size, maxBytes int) string {
	if _, kind, err := wire.ParseTopic(topic); err != nil || kind != wire.KindStatus {
		return retainNotStatus
	}
	if size > maxBytes {
		return retainTooLarge
	}
	return ""
}

// retainGuard is the embedded broker's hook that keeps retained messages
// to the rule of retainRefusal, in every security mode. A publish or last
// will that breaks it is not stored: it goes to the current subscribers
// as a plain message (MQTT 3.1.1 has no way to refuse one publish short of
// closing the connection), is counted and logged. The hub's own inline
// client never retains.
type retainGuard struct {
	mqtt.HookBase
	maxBytes int
	refused  *prometheus.CounterVec // by reason; nil: not counted
	log      *brokerLog
}

// ID names the hook.
func (g *retainGuard) ID() string { return "edgeflow-retain-guard" }

// Provides lists the hook methods used.
func (g *retainGuard) Provides(b byte) bool {
	return bytes.Contains([]byte{mqtt.OnPublish, mqtt.OnWill}, []byte{b})
}

// OnPublish takes the retain flag off a retained publish that breaks the
// rule.
func (g *retainGuard) OnPublish(cl *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	if !pk.FixedHeader.Retain || cl.Net.Inline {
		return pk, nil
	}
	if why := retainRefusal(pk.TopicName, len(pk.Payload), g.maxBytes); why != "" {
		pk.FixedHeader.Retain = false
		g.refuse(cl, "publish", pk.TopicName, len(pk.Payload), why)
	}
	return pk, nil
}

// OnWill takes the retain flag off a last will that breaks the rule.
func (g *retainGuard) OnWill(cl *mqtt.Client, will mqtt.Will) (mqtt.Will, error) {
	if will.Retain {
		if why := retainRefusal(will.TopicName, len(will.Payload), g.maxBytes); why != "" {
			will.Retain = false
			g.refuse(cl, "will", will.TopicName, len(will.Payload), why)
		}
	}
	return will, nil
}

func (g *retainGuard) refuse(cl *mqtt.Client, what, topic string, size int, why string) {
	if g.refused != nil {
		g.refused.WithLabelValues(why).Inc()
	}
	if len(topic) > 128 {
		topic = topic[:128] + "..."
	}
	g.log.warn("broker did not retain a message (delivered as a plain message): only a device's status within mqtt-max-retained-bytes is retained",
		"why", why, "what", what, "topic", topic, "bytes", size, "max_bytes", g.maxBytes, "client", cl.ID, "remote", cl.Net.Remote)
}

// brokerLog logs at most one line per second, with the number of lines it
// held back since the previous one; safe for concurrent use.
type brokerLog struct {
	log *slog.Logger
	now func() time.Time
	mu  sync.Mutex
	lim lograte.Limiter
}

func newBrokerLog(log *slog.Logger, now func() time.Time) *brokerLog {
	if now == nil {
		now = time.Now
	}
	return &brokerLog{log: log, now: now, lim: lograte.Limiter{Every: time.Second}}
}

func (r *brokerLog) warn(msg string, args ...any) {
	r.mu.Lock()
	ok, suppressed := r.lim.Allow(r.now())
	r.mu.Unlock()
	if !ok || r.log == nil {
		return
	}
	if suppressed > 0 {
		args = append(args, "suppressed", suppressed)
	}
	r.log.Warn(msg, args...)
}
