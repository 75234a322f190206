package cluster

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestOpenRetries: Open tries again after a failure a retry may fix
// (saying why while it waits), returns a permanent error at once, bounds
// each try by Timeout only when asked, and stops when its context ends.
func TestOpenRetries(t *testing.T) {
	st := &Stream{Name: "S", Timeout: 50 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx := context.Background()
	timeout := errors.New("bucket B: context deadline exceeded")
	tries := 0
	var reasons []string
	err := st.Open(ctx, "the bucket B", true, func(error) bool { return false }, func(actx context.Context) error {
		if d, ok := actx.Deadline(); !ok || time.Until(d) > st.Timeout {
			t.Errorf("bounded try without a deadline within Timeout (%v, %v)", d, ok)
		}
		if r := st.opening.Load(); r != nil {
			reasons = append(reasons, *r)
		}
		if tries++; tries < 3 {
			return timeout
		}
		return nil
	})
	if err != nil || tries != 3 {
		t.Fatalf("err %v after %d tries, want nil after 3", err, tries)
	}
	if len(reasons) != 2 || reasons[1] != "opening the bucket B: "+timeout.Error() {
		t.Errorf("readiness reasons while retrying %q: want the last failure, named", reasons)
	}
	if r := st.opening.Load(); r != nil {
		t.Errorf("reason %q left after success", *r)
	}

	permanent := errors.New("bucket exists with other settings")
	tries = 0
	err = st.Open(ctx, "the bucket B", false, func(err error) bool { return errors.Is(err, permanent) }, func(actx context.Context) error {
		if _, ok := actx.Deadline(); ok {
			t.Error("unbounded try has a deadline")
		}
		tries++
		return permanent
	})
	if !errors.Is(err, permanent) || tries != 1 {
		t.Errorf("permanent error: err %v after %d tries, want it after 1", err, tries)
	}

	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	err = st.Open(cctx, "the bucket B", true, func(error) bool { return false }, func(context.Context) error { return timeout })
	if err == nil || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "the bucket B") || !strings.Contains(err.Error(), timeout.Error()) {
		t.Errorf("context ended: err %v, want one naming the bucket and the last failure", err)
	}
}
