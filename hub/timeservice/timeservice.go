package timeservice

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// ErrBadTimeRequest means a time request could not be answered: a topic
// that is not edge/v1/{device}/time/req or a payload that is not a valid
// time request frame. It wraps the wire error when there is one.
var ErrBadTimeRequest = errors.New("hub: bad time request")

// TimeService is the hub's time responder for agents that cannot reach
// NTP: it answers edge/v1/{device}/time/req with NTP's timestamps t2
// (receipt) and t3 (just before publishing) on edge/v1/{device}/time/resp.
// It needs nothing from the hub but a clock and a publish function, and
// satisfies TimeRequestHandler.
type TimeService struct {
	now     func() time.Time
	publish func(topic string, payload []byte) error
	log     *slog.Logger
}

// NewTimeService returns a responder that reads now (nil: time.Now) and
// answers through publish (e.g. Server.Publish). log may be nil.
func NewTimeService(now func() time.Time, publish func(topic string, payload []byte) error, log *slog.Logger) (*TimeService, error) {
	if publish == nil {
		return nil, errors.New("hub: NewTimeService: publish is nil")
	}
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.Default()
	}
	return &TimeService{now: now, publish: publish, log: log.With("component", "timeservice")}, nil
}

// HandleRequest answers one request, logging (at debug level: any device
// can send garbage) a request it cannot answer. It implements
// TimeRequestHandler.
func (s *TimeService) HandleRequest(topic string, payload []byte) {
	if err := s.Respond(topic, payload); err != nil {
		s.log.Debug("time request not answered", "topic", topic, "err", err)
	}
}

// Respond decodes the request on topic, stamps t2 on receipt and t3 just
// before publishing the response to the device's response topic. Errors
// wrap ErrBadTimeRequest (malformed, oversized or misrouted request) or
// come from publish.
func (s *TimeService) Respond(topic string, payload []byte) error {
	t2 := s.now()
	device, kind, err := wire.ParseTopic(topic)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadTimeRequest, err)
	}
	if kind != wire.KindTimeReq {
		return fmt.Errorf("%w: topic %q is not a time request topic", ErrBadTimeRequest, topic)
	}
	req, err := wire.DecodeTimeRequest(payload, wire.Limits{})
	if err != nil {
		return fmt.Errorf("%w from %s: %w", ErrBadTimeRequest, device, err)
	}
	resp := &wirepb.TimeResponse{RequestId: req.RequestId, T1Ns: req.T1Ns, T2Ns: t2.UnixNano()}
	resp.T3Ns = s.now().UnixNano()
	out, err := wire.EncodeTimeResponse(resp)
	if err != nil {
		return fmt.Errorf("hub: encode time response for %s: %w", device, err)
	}
	if err := s.publish(wire.TimeRespTopic(device), out); err != nil {
		return fmt.Errorf("hub: publish time response for %s: %w", device, err)
	}
	return nil
}
