package clocksync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// maxPendingExchanges bounds the requests awaiting an answer, so a hub that
// never answers cannot make Exchange callers pile up memory.
const maxPendingExchanges = 16

// MQTTHub is a HubExchanger over a paho client that the caller owns and
// connects. Requests go to edge/v1/{device}/time/req at QoS 0 (a retried
// time request is worthless) and answers are matched by request id on
// edge/v1/{device}/time/resp.
type MQTTHub struct {
	client mqtt.Client
	device string
	now    func() time.Time
	log    *slog.Logger

	mu         sync.Mutex
	subscribed bool
	pending    map[uint64]chan hubReply
}

type hubReply struct {
	resp *wirepb.TimeResponse
	t4   time.Time
}

// NewMQTTHub returns an exchanger for device over client. now must be the
// device wall clock the Clock uses (nil: time.Now); log may be nil.
func NewMQTTHub(client mqtt.Client, device string, now func() time.Time, log *slog.Logger) (*MQTTHub, error) {
	if client == nil {
		return nil, errors.New("clocksync: NewMQTTHub: client is nil")
	}
	if err := wire.ValidateDeviceID(device); err != nil {
		return nil, fmt.Errorf("clocksync: NewMQTTHub: %w", err)
	}
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.Default()
	}
	return &MQTTHub{client: client, device: device, now: now, log: log, pending: make(map[uint64]chan hubReply)}, nil
}

// Resubscribe makes the next Exchange subscribe again. Call it from the
// client's OnConnectHandler when sessions are clean, since a new session
// has lost the subscription.
func (h *MQTTHub) Resubscribe() {
	h.mu.Lock()
	h.subscribed = false
	h.mu.Unlock()
}

// Exchange implements HubExchanger.
func (h *MQTTHub) Exchange(ctx context.Context, req *wirepb.TimeRequest) (*wirepb.TimeResponse, time.Time, error) {
	if !h.client.IsConnectionOpen() {
		return nil, time.Time{}, ErrNotConnected
	}
	if err := h.subscribe(ctx); err != nil {
		return nil, time.Time{}, err
	}
	payload, err := wire.EncodeTimeRequest(req)
	if err != nil {
		return nil, time.Time{}, err
	}
	ch := make(chan hubReply, 1)
	h.mu.Lock()
	if len(h.pending) >= maxPendingExchanges {
		h.mu.Unlock()
		return nil, time.Time{}, fmt.Errorf("clocksync: %d hub time requests already pending", maxPendingExchanges)
	}
	h.pending[req.RequestId] = ch
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.pending, req.RequestId)
		h.mu.Unlock()
	}()
	if err := wait(ctx, h.client.Publish(wire.TimeReqTopic(h.device), 0, false, payload)); err != nil {
		return nil, time.Time{}, fmt.Errorf("clocksync: publish time request: %w", err)
	}
	select {
	case r := <-ch:
		return r.resp, r.t4, nil
	case <-ctx.Done():
		return nil, time.Time{}, fmt.Errorf("clocksync: waiting for the hub's time response: %w", ctx.Err())
	}
}

func (h *MQTTHub) subscribe(ctx context.Context) error {
	h.mu.Lock()
	done := h.subscribed
	h.mu.Unlock()
	if done {
		return nil
	}
	if err := wait(ctx, h.client.Subscribe(wire.TimeRespTopic(h.device), 0, h.HandleMessage)); err != nil {
		return fmt.Errorf("clocksync: subscribe %s: %w", wire.TimeRespTopic(h.device), err)
	}
	h.mu.Lock()
	h.subscribed = true
	h.mu.Unlock()
	return nil
}

// HandleMessage is the paho handler for time responses. It is exported
// for an uplink that routes its subscriptions itself; t4 is read before
// anything else.
func (h *MQTTHub) HandleMessage(_ mqtt.Client, msg mqtt.Message) {
	h.handle(msg.Payload(), h.now())
}

// handle decodes one response payload and hands it to the waiting
// Exchange, if any. Malformed and unexpected answers are dropped.
func (h *MQTTHub) handle(payload []byte, t4 time.Time) bool {
	resp, err := wire.DecodeTimeResponse(payload, wire.Limits{})
	if err != nil {
		h.log.Debug("dropping malformed time response", "device", h.device, "err", err)
		return false
	}
	h.mu.Lock()
	ch, ok := h.pending[resp.RequestId]
	delete(h.pending, resp.RequestId)
	h.mu.Unlock()
	if !ok {
		h.log.Debug("dropping unexpected time response", "device", h.device, "request_id", resp.RequestId)
		return false
	}
	ch <- hubReply{resp: resp, t4: t4}
	return true
}

// wait waits for a paho token or ctx.
func wait(ctx context.Context, t mqtt.Token) error {
	select {
	case <-t.Done():
		return t.Error()
	case <-ctx.Done():
		return ctx.Err()
	}
}
