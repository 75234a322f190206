package ratelimit

import (
	"testing"
	"time"
)

// TestRateLimiterRefills: a full bucket lets a batch larger than itself
// through into debt, refuses the next until the debt is paid at the rate,
// and a zero rate limits nothing.
func TestRateLimiterRefills(t *testing.T) {
	r := New(1000, 500)
	t0 := int64(1e18)
	if err := r.Take("d", 800, t0); err != nil { // full bucket, goes into debt
		t.Fatal(err)
	}
	if err := r.Take("d", 1, t0+int64(100*time.Millisecond)); err == nil { // -300 + 100
		t.Fatal("allowed while in debt")
	}
	if err := r.Take("d", 1, t0+int64(400*time.Millisecond)); err != nil { // -300 + 400
		t.Fatalf("not refilled: %v", err)
	}
	if New(0, 0).Take("d", 1e9, t0) != nil {
		t.Fatal("a zero rate limits")
	}
}

// TestRetryAfter: the hint of a RETRY_LATER ack is the time until the
// device's bucket is out of debt; none for a bucket not in debt, an
// unknown device or no limiter.
func TestRetryAfter(t *testing.T) {
	r := New(1000, 500)
	t0 := int64(1e18)
	if err := r.Take("d", 800, t0); err != nil { // 300 events of debt
		t.Fatal(err)
	}
	if got := r.RetryAfter("d", t0+int64(100*time.Millisecond)); got < 200*time.Millisecond-time.Microsecond || got > 200*time.Millisecond {
		t.Fatalf("retry after %v with 200 events of debt at 1000/s, want 200ms", got)
	}
	var none *Limiter
	for _, got := range []time.Duration{r.RetryAfter("d", t0+int64(300*time.Millisecond)), r.RetryAfter("other", t0), none.RetryAfter("d", t0)} {
		if got != 0 {
			t.Fatalf("retry after %v, want 0", got)
		}
	}
}
