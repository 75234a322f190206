package clocksync

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/beevik/ntp"

	"edgeflow/wire/wirepb"
)

// server is the polling state of one NTP server. Guarded by Clock.mu.
type server struct {
	addr      string
	holdUntil time.Duration // monotonic time before which it is not asked
	rateKiss  int           // consecutive RATE kisses, for backoff
}

// queryServers asks every server that is not held off, concurrently, and
// returns the valid samples.
func (c *Clock) queryServers(ctx context.Context) []sample {
	now := c.opts.Mono()
	type result struct {
		srv  *server
		s    sample
		resp *ntp.Response
		err  error
	}
	results := make([]result, len(c.servers))
	var wg sync.WaitGroup
	for i, srv := range c.servers {
		results[i].srv = srv
		if now < srv.holdUntil || ctx.Err() != nil {
			results[i].err = errHeld
			continue
		}
		wg.Go(func() {
			results[i].s, results[i].resp, results[i].err = c.queryNTP(srv.addr)
		})
	}
	wg.Wait()
	var out []sample
	for _, r := range results {
		switch {
		case r.err == errHeld:
		case r.err == nil:
			r.srv.rateKiss = 0
			c.metrics.samples.WithLabelValues("ntp", "ok").Inc()
			out = append(out, r.s)
		default:
			c.noteFailure(r.srv, r.resp, r.err, now)
		}
	}
	return out
}

// noteFailure counts a failed query and backs off a server that sent a
// kiss of death (RFC 5905 section 7.4).
func (c *Clock) noteFailure(srv *server, resp *ntp.Response, err error, now time.Duration) {
	switch {
	case resp != nil && resp.IsKissOfDeath():
		c.metrics.samples.WithLabelValues("ntp", "kiss").Inc()
		hold := c.opts.KissHold
		if resp.KissCode == "RATE" {
			srv.rateKiss++
			hold = min(c.opts.KissHold, time.Duration(1<<min(srv.rateKiss+1, 10))*c.opts.PollInterval)
		} else if resp.KissCode != "DENY" && resp.KissCode != "RSTR" {
			hold = c.opts.PollInterval
		}
		srv.holdUntil = now + hold
		c.log.Warn("NTP server sent a kiss of death; holding off", "server", srv.addr, "code", resp.KissCode, "hold", hold)
	case resp != nil || errors.Is(err, ErrTooFar):
		c.metrics.samples.WithLabelValues("ntp", "invalid").Inc()
		c.log.Debug("NTP response rejected", "err", err)
	default:
		c.metrics.samples.WithLabelValues("ntp", "error").Inc()
		c.log.Debug("NTP query failed", "err", err)
	}
}

// monoEpoch is the origin of the monotonic timeline handed to the NTP
// client as its "system clock", so that every NTP timestamp of ours is a
// monotonic reading and a wall step cannot corrupt a sample.
var monoEpoch = time.Unix(0, 0)

// queryNTP performs one NTP exchange and turns a valid response into a
// sample. It returns the response with a validation error so the caller
// can react to kiss codes.
func (c *Clock) queryNTP(addr string) (sample, *ntp.Response, error) {
	resp, err := ntp.QueryWithOptions(addr, ntp.QueryOptions{
		Timeout:       c.opts.QueryTimeout,
		Dialer:        c.opts.Dialer,
		GetSystemTime: func() time.Time { return monoEpoch.Add(c.opts.Mono()) },
	})
	if err != nil {
		return sample{}, nil, wrapRound("ntp", addr, err)
	}
	if err := resp.Validate(); err != nil {
		if resp.IsKissOfDeath() {
			err = fmt.Errorf("%w (code %s)", err, resp.KissCode)
		}
		return sample{}, resp, wrapRound("ntp", addr, err)
	}
	if resp.RTT > c.opts.MaxDelay {
		return sample{}, resp, wrapRound("ntp", addr, fmt.Errorf("%w: %v > MaxDelay %v", ErrTooFar, resp.RTT, c.opts.MaxDelay))
	}
	t1 := resp.Timestamps.ClientXmit.Sub(monoEpoch)
	t4 := resp.Timestamps.ClientRecv.Sub(monoEpoch)
	// An honest server's time at our midpoint lies within half the delay
	// of the computed offset, plus its own distance from the reference.
	bound := resp.RTT/2 + resp.RootDelay/2 + resp.RootDispersion + resp.Precision
	return sample{
		mono:   t1 + (t4-t1)/2,
		boot:   int64(resp.ClockOffset),
		delay:  resp.RTT,
		bound:  bound,
		source: addr,
		method: wirepb.TimeMethod_TIME_METHOD_NTP,
	}, resp, nil
}
