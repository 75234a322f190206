package broker

import (
	"bytes"
	"strings"
	"sync"
	"sync/atomic"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"edgeflow/wire"
)

// handoff is the embedded broker's hook that hands device batches and time
// requests to the hub as they arrive, instead of routing them through the
// broker's topic index. Routing a publish walks that index and allocates a
// set of subscriber maps for every message: at 10,000 devices sending a
// batch a second each, a tenth of hubd's CPU and a fifth of its allocated
// bytes (so of its collections). The hub is these messages' only consumer
// unless another client subscribes to them; while any client holds such a
// subscription (edge/v1/#, say), the broker routes them as usual and the
// hub receives them through its inline subscription, so no subscriber
// misses a message. The PUBACK of a handed-off QoS 1 publish is sent as
// before, after the hub has taken the message.
type handoff struct {
	mqtt.HookBase
	e *Embedded
	h atomic.Pointer[IdentifiedHandler]

	mu       sync.Mutex
	watch    map[string]map[string]bool // client id -> its filters that match batches or time requests
	watchers atomic.Int64               // filters in watch
	handed   atomic.Uint64              // messages handed to the hub directly
	routed   atomic.Uint64              // messages left to the broker (watchers, retained)
}

func newHandoff(e *Embedded) *handoff {
	return &handoff{e: e, watch: map[string]map[string]bool{}}
}

// ID names the hook.
func (d *handoff) ID() string { return "edgeflow-hub-handoff" }

// Provides lists the hook methods used.
func (d *handoff) Provides(b byte) bool {
	return bytes.Contains([]byte{mqtt.OnPublish, mqtt.OnSubscribed, mqtt.OnUnsubscribed}, []byte{b})
}

// start sets the hub's handler; until then every message is routed.
func (d *handoff) start(h IdentifiedHandler) { d.h.Store(&h) }

// OnPublish hands a device's batch or time request to the hub and tells
// the broker not to route it (packets.CodeSuccessIgnore still acknowledges
// a QoS 1 publish). Anything else, and everything while another client
// subscribes to these topics, goes the usual way.
func (d *handoff) OnPublish(cl *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	h := d.h.Load()
	if h == nil || cl.Net.Inline || d.e.paused.Load() || !handedOff(pk.TopicName) {
		return pk, nil
	}
	if d.watchers.Load() > 0 || pk.FixedHeader.Retain {
		d.routed.Add(1)
		return pk, nil
	}
	id := ""
	if d.e.auth.sec.enabled() {
		id, _ = d.e.auth.identity(cl)
	}
	(*h)(pk.TopicName, id, pk.Payload)
	d.handed.Add(1)
	return pk, packets.CodeSuccessIgnore
}

// OnSubscribed records the client's granted filters that match batches or
// time requests.
func (d *handoff) OnSubscribed(cl *mqtt.Client, pk packets.Packet, reasonCodes []byte) {
	if cl.Net.Inline {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, sub := range pk.Filters {
		if i >= len(reasonCodes) || reasonCodes[i] >= packets.ErrUnspecifiedError.Code || !watchesHandedOff(sub.Filter) {
			continue
		}
		fs := d.watch[cl.ID]
		if fs == nil {
			fs = map[string]bool{}
			d.watch[cl.ID] = fs
		}
		if !fs[sub.Filter] {
			fs[sub.Filter] = true
			d.watchers.Add(1)
			d.e.log.Info("a client subscribes to device batches or time requests: the embedded broker routes them to it as well, at a cost in CPU",
				"client", cl.ID, "filter", sub.Filter)
		}
	}
}

// OnUnsubscribed forgets the filters a client dropped (the broker also
// calls it when a session ends).
func (d *handoff) OnUnsubscribed(cl *mqtt.Client, pk packets.Packet) {
	if cl.Net.Inline {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	fs := d.watch[cl.ID]
	for _, sub := range pk.Filters {
		if fs[sub.Filter] {
			delete(fs, sub.Filter)
			d.watchers.Add(-1)
		}
	}
	if fs != nil && len(fs) == 0 {
		delete(d.watch, cl.ID)
	}
}

// handedOff reports whether topic is a device's batch or time request
// topic (device ids are checked by the hub, which rejects bad ones).
func handedOff(topic string) bool {
	rest, ok := strings.CutPrefix(topic, wire.TopicPrefix)
	if !ok {
		return false
	}
	_, kind, ok := strings.Cut(rest, "/")
	return ok && (kind == wire.KindBatch || kind == wire.KindTimeReq)
}

// watchesHandedOff reports whether filter (possibly a shared
// subscription's) matches the batch or time request topic of any device.
func watchesHandedOff(filter string) bool {
	if rest, ok := strings.CutPrefix(filter, "$share/"); ok {
		_, filter, ok = strings.Cut(rest, "/")
		if !ok {
			return false
		}
	}
	levels := strings.Split(filter, "/")
	for _, topic := range handedOffTopics {
		if filterMatchesAnyDevice(levels, topic) {
			return true
		}
	}
	return false
}

// handedOffTopics are the levels of the batch and time request topics,
// with "" standing for the device id.
var handedOffTopics = [][]string{
	strings.Split(wire.Topic("", wire.KindBatch), "/"),
	strings.Split(wire.Topic("", wire.KindTimeReq), "/"),
}

// filterMatchesAnyDevice matches filter levels against topic levels in
// which an empty level stands for any device id.
func filterMatchesAnyDevice(filter, topic []string) bool {
	for i, f := range filter {
		if f == "#" {
			return true
		}
		if i >= len(topic) {
			return false
		}
		if f != "+" && topic[i] != "" && f != topic[i] {
			return false
		}
	}
	return len(filter) == len(topic)
}
