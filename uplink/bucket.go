package uplink

import "time"

// bucket is a token bucket of bytes per second. It holds up to burst
// tokens; a frame larger than the burst is allowed once the bucket is full
// and leaves it in debt, so any frame eventually goes and the long-run rate
// still holds. Not safe for concurrent use: the send loop owns it.
type bucket struct {
	rate   float64 // tokens (bytes) per second
	burst  float64
	tokens float64
	last   time.Time
}

func newBucket(bytesPerSec int64, burst int, now time.Time) *bucket {
	b := float64(max(int64(burst), bytesPerSec))
	return &bucket{rate: float64(bytesPerSec), burst: b, tokens: b, last: now}
}

// take consumes n tokens and returns 0 if they are available, or returns
// how long to wait before asking again and consumes nothing.
func (b *bucket) take(n int, now time.Time) time.Duration {
	if dt := now.Sub(b.last).Seconds(); dt > 0 {
		b.tokens = min(b.burst, b.tokens+dt*b.rate)
		b.last = now
	}
	need := min(float64(n), b.burst)
	if b.tokens >= need {
		b.tokens -= float64(n)
		return 0
	}
	wait := time.Duration((need - b.tokens) / b.rate * float64(time.Second))
	return max(wait, time.Millisecond)
}
