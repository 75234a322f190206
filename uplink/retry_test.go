package uplink

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestRetryDelay(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	lo, hi := 100*time.Millisecond, 2*time.Second
	for _, c := range []struct {
		attempt  int
		hint     time.Duration
		min, max time.Duration
	}{
		{0, 0, 50 * time.Millisecond, 100 * time.Millisecond},
		{3, 0, 400 * time.Millisecond, 800 * time.Millisecond},
		{20, 0, time.Second, 2 * time.Second},
		{0, 700 * time.Millisecond, 700 * time.Millisecond, 700 * time.Millisecond},
		{0, time.Hour, hi, hi}, // the hint is capped at BackoffMax
	} {
		for range 100 {
			if d := retryDelay(c.attempt, c.hint, lo, hi, rnd); d < c.min || d > c.max {
				t.Fatalf("attempt %d hint %v: %v not in [%v, %v]", c.attempt, c.hint, d, c.min, c.max)
			}
		}
	}
}
