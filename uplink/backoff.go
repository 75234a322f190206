package uplink

import (
	"math/rand/v2"
	"time"
)

// backoffCeiling is the upper bound of the delay before reconnect attempt
// k: min(hi, lo*2^k).
func backoffCeiling(attempt int, lo, hi time.Duration) time.Duration {
	c := lo
	for i := 0; i < attempt && c < hi; i++ {
		c *= 2
	}
	return min(c, hi)
}

// backoff returns the delay before reconnect attempt k (0-based): uniform
// in [0, backoffCeiling(k)] ("full jitter"). Spreading every attempt over
// the whole interval, not just adding a little noise to a fixed schedule,
// is what keeps a fleet that lost its broker at the same instant from
// arriving back in waves.
func backoff(attempt int, lo, hi time.Duration, rnd *rand.Rand) time.Duration {
	return time.Duration(rnd.Int64N(int64(backoffCeiling(attempt, lo, hi)) + 1))
}
