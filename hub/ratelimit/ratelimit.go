package ratelimit

import (
	"sync"
	"time"

	"edgeflow/hub/batchview"
)

// Limiter is a token bucket of events per device. A batch passes when
// its device's bucket is not in debt and then takes all its events, so a
// batch larger than the bucket still passes after a pause and the
// sustained rate stays bounded. It is safe for concurrent use; a nil
// Limiter allows everything.
type Limiter struct {
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

// New returns a limiter of rate events per second per device, with
// buckets of burst events (at least 1); nil (no limit) for a rate of 0.
func New(rate, burst float64) *Limiter {
	if rate <= 0 {
		return nil
	}
	return &Limiter{rate: rate, burst: max(burst, 1), buckets: map[string]*bucket{}}
}

// Take charges n events to device at nowNs, or returns a rate_limited
// rejection (batchview.ReasonRateLimited). A nil limiter allows
// everything.
func (r *Limiter) Take(device string, n int, nowNs int64) error {
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

// RetryAfter is how long until device's bucket is out of debt as of nowNs
// (0 if it is not in debt): the hint sent with a RETRY_LATER ack.
func (r *Limiter) RetryAfter(device string, nowNs int64) time.Duration {
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
func (r *Limiter) pruneLocked(nowNs int64) {
	for d, b := range r.buckets {
		if b.tokens+float64(nowNs-b.lastNs)/1e9*r.rate >= r.burst {
			delete(r.buckets, d)
		}
	}
}
