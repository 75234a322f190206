package buffer

import (
	"strings"
	"testing"
	"time"
)

// TestStreamOptionsMaxAgeRange: MaxAge is 0 (off) or at least a second; a
// bare number read as nanoseconds would drop every event before it could
// be sent.
func TestStreamOptionsMaxAgeRange(t *testing.T) {
	for _, c := range []struct {
		age time.Duration
		ok  bool
	}{{0, true}, {time.Second, true}, {24 * time.Hour, true}, {5, false}, {999 * time.Millisecond, false}, {-time.Hour, false}} {
		o := StreamOptions{MaxAge: c.age}
		o.EnsureDefaults()
		err := o.Validate()
		if c.ok != (err == nil) || (err != nil && !strings.Contains(err.Error(), "stream max age")) {
			t.Errorf("MaxAge %v: %v, want ok=%v", c.age, err, c.ok)
		}
	}
}
