// Package retry holds what the hub's retrying workers (sinks, alert
// outputs) share: a sleep that ends with its context.
package retry

import (
	"context"
	"time"
)

// Sleep waits d, or until ctx ends, so a worker backing off stops at
// once on shutdown; it reports whether d passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
