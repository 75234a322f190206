package hub

import (
	"sync"
	"time"

	"edgeflow/hub/batchview"
	"edgeflow/wire"
)

// rateLimiter is a token bucket of events per device. A batch passes when
// its device's bucket is not in debt and then takes all its events, so a
// batch larger than the bucket still passes after a pause and the
// sustained rate stays bounded.
type rateLimiter struct {
	rate, burst float64 // events per second, bucket size in events

	mu      sync.Mutex
	buckets map[string]*bucket
}

// bucket is one device's tokens as of lastNs.
type bucket struct {
	tokens float64
	lastNs int64
}

// maxBuckets bounds the limiter's memory: beyond it, full buckets (devices
// idle long enough to have refilled) are forgotten.
const maxBuckets = 1 << 16

// newRateLimiter returns nil (no limit) for a rate of 0.
func newRateLimiter(rate, burst float64) *rateLimiter {
	if rate <= 0 {
		return nil
	}
	return &rateLimiter{rate: rate, burst: max(burst, 1), buckets: map[string]*bucket{}}
}

// take charges n events to device at nowNs, or returns a rate_limited
// rejection. A nil limiter allows everything.
func (r *rateLimiter) take(device string, n int, nowNs int64) error {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.buckets[device]
	if b == nil {
		if len(r.buckets) >= maxBuckets {
			r.pruneLocked(nowNs)
		}
		b = &bucket{tokens: r.burst, lastNs: nowNs}
		r.buckets[device] = b
	}
	if nowNs > b.lastNs {
		b.tokens = min(r.burst, b.tokens+float64(nowNs-b.lastNs)/1e9*r.rate)
		b.lastNs = nowNs
	}
	if b.tokens < 0 {
		return batchview.Reject(batchview.ReasonRateLimited, "device %s is over its %.0f events/s (the batch's %d events were not applied; send them again later)", device, r.rate, n)
	}
	b.tokens -= float64(n)
	return nil
}

// retryAfter is how long until device's bucket is out of debt as of nowNs
// (0 if it is not in debt): the hint sent with a RETRY_LATER ack.
func (r *rateLimiter) retryAfter(device string, nowNs int64) time.Duration {
	if r == nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.buckets[device]
	if b == nil {
		return 0
	}
	tokens := b.tokens
	if nowNs > b.lastNs {
		tokens += float64(nowNs-b.lastNs) / 1e9 * r.rate
	}
	if tokens >= 0 {
		return 0
	}
	return time.Duration(-tokens / r.rate * 1e9)
}

// pruneLocked forgets the buckets that are full by now.
func (r *rateLimiter) pruneLocked(nowNs int64) {
	for d, b := range r.buckets {
		if b.tokens+float64(nowNs-b.lastNs)/1e9*r.rate >= r.burst {
			delete(r.buckets, d)
		}
	}
}

// handleFrom is the identified transport's handler: a batch published by a
// verified device for another device is refused before it is decoded (not
// acked: the ack topic belongs to the device in the topic), counted as
// REJECTED with reason identity_mismatch, and logged at a limited rate.
func (s *Server) handleFrom(topic, identity string, payload []byte) {
	if identity != "" {
		if device, kind, err := wire.ParseTopic(topic); err == nil && kind == wire.KindBatch && device != identity {
			s.m.batches.WithLabelValues("rejected").Inc()
			s.m.rejected.WithLabelValues(string(batchview.ReasonIdentityMismatch)).Inc()
			s.rejLog.log(s.log, "batch", device, "rejected batch",
				batchview.Reject(batchview.ReasonIdentityMismatch, "published by device %q for device %q", identity, device))
			return
		}
	}
	s.handle(topic, payload)
}
