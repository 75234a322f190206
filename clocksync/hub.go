package clocksync

import (
	"context"
	"fmt"
	"time"

	"edgeflow/wire/wirepb"
)

// HubExchanger performs one time request/response round trip with the hub
// (edge/v1/{device}/time/req and .../resp). MQTTHub implements it over a
// paho client; the uplink may provide its own.
type HubExchanger interface {
	// Exchange sends req and waits for the response with the same
	// RequestId, or until ctx ends. t4 is the device wall clock (the clock
	// req.T1Ns was read from) when the response arrived, read as close to
	// its arrival as the transport allows.
	Exchange(ctx context.Context, req *wirepb.TimeRequest) (resp *wirepb.TimeResponse, t4 time.Time, err error)
}

// hubSource is the Source of samples from the hub.
const hubSource = "hub"

// queryHub performs one hub exchange and turns it into a sample. The wall
// clock is what the request carries (the proto says t1 is the device
// clock); the sample is placed on the monotonic timeline by reading both
// clocks before and after and refusing an exchange a wall step straddled.
func (c *Clock) queryHub(ctx context.Context) (sample, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.HubTimeout)
	defer cancel()
	m1 := c.opts.Mono()
	w1 := c.opts.Wall()
	req := &wirepb.TimeRequest{RequestId: c.reqID.Add(1), T1Ns: w1.UnixNano()}
	resp, t4, err := c.opts.Hub.Exchange(ctx, req)
	m4 := c.opts.Mono()
	w4 := c.opts.Wall()
	if err != nil {
		return sample{}, wrapRound("hub", "exchange", err)
	}
	if time.Duration((w4.UnixNano()-int64(m4))-(w1.UnixNano()-int64(m1))).Abs() > c.opts.StepThreshold {
		c.checkStep(m4, w4)
		return sample{}, errStepDuring
	}
	return hubSample(req, resp, w1, m1, t4, m4, c.opts.MaxDelay)
}

// hubSample checks a response against its request and computes the
// sample as NTP does from four timestamps.
func hubSample(req *wirepb.TimeRequest, resp *wirepb.TimeResponse, w1 time.Time, m1 time.Duration, t4 time.Time, m4 time.Duration, maxDelay time.Duration) (sample, error) {
	switch {
	case resp == nil:
		return sample{}, fmt.Errorf("%w: no response", ErrBadTimeResponse)
	case resp.RequestId != req.RequestId || resp.T1Ns != req.T1Ns:
		return sample{}, fmt.Errorf("%w: answers request %d (t1 %d), sent %d (t1 %d)", ErrBadTimeResponse, resp.RequestId, resp.T1Ns, req.RequestId, req.T1Ns)
	case resp.T3Ns < resp.T2Ns:
		return sample{}, fmt.Errorf("%w: t3 %d before t2 %d", ErrBadTimeResponse, resp.T3Ns, resp.T2Ns)
	}
	t1 := req.T1Ns
	elapsed := t4.UnixNano() - t1
	if elapsed < 0 || time.Duration(elapsed) > m4-m1+time.Millisecond {
		return sample{}, fmt.Errorf("%w: t4 is %v after t1, monotonic clock says %v", ErrBadTimeResponse, time.Duration(elapsed), m4-m1)
	}
	delay := time.Duration(elapsed - (resp.T3Ns - resp.T2Ns))
	if delay < 0 {
		return sample{}, fmt.Errorf("%w: hub held the request %v, longer than the round trip %v", ErrBadTimeResponse, time.Duration(resp.T3Ns-resp.T2Ns), time.Duration(elapsed))
	}
	if delay > maxDelay {
		return sample{}, fmt.Errorf("%w: %v > MaxDelay %v", ErrTooFar, delay, maxDelay)
	}
	// offset = ((t2 - t1) + (t3 - t4)) / 2, true minus wall; the wall ran
	// at wall = mono + (w1 - m1) throughout (no step, checked by caller).
	offset := ((resp.T2Ns - t1) + (resp.T3Ns - t4.UnixNano())) / 2
	return sample{
		mono:   m1 + time.Duration(elapsed/2),
		boot:   w1.UnixNano() - int64(m1) + offset,
		delay:  delay,
		bound:  delay / 2,
		source: hubSource,
		method: wirepb.TimeMethod_TIME_METHOD_HUB_SYNC,
	}, nil
}
