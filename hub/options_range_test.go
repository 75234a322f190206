package hub

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestValidateDurationRanges: durations below their floors (a bare number
// read as nanoseconds falls below every one) and a retention shorter than
// the checkpoint interval are refused, naming the fields.
func TestValidateDurationRanges(t *testing.T) {
	cases := []struct {
		name   string
		set    func(*Options)
		fields []string // in the message; nil: valid
	}{
		{"defaults", func(*Options) {}, nil},
		{"checkpoint 150ms", func(o *Options) { o.CheckpointInterval = 150 * time.Millisecond }, nil},
		{"retention equal to checkpoint", func(o *Options) { o.CheckpointInterval, o.RetentionMaxAge = time.Hour, time.Hour }, nil},
		{"checkpoint 5ns", func(o *Options) { o.CheckpointInterval = 5 }, []string{"CheckpointInterval", "100ms"}},
		{"retention 168ns", func(o *Options) { o.RetentionMaxAge = 168 }, []string{"RetentionMaxAge", "1m0s"}},
		{"retention interval 2ns", func(o *Options) { o.RetentionInterval = 2 }, []string{"RetentionInterval", "1s"}},
		{"retention shorter than checkpoint", func(o *Options) { o.CheckpointInterval, o.RetentionMaxAge = 10*time.Minute, 5*time.Minute },
			[]string{"RetentionMaxAge", "CheckpointInterval", "10m0s"}},
		{"shutdown 1ms", func(o *Options) { o.ShutdownTimeout = time.Millisecond }, []string{"ShutdownTimeout", "1s"}},
		{"tick 1ms", func(o *Options) { o.TickInterval = time.Millisecond }, []string{"TickInterval", "10ms"}},
		{"checkpoint negative", func(o *Options) { o.CheckpointInterval = -time.Second }, []string{"CheckpointInterval"}},
		{"stream expiry 30m", func(o *Options) { o.StreamIdleExpiry = 30 * time.Minute }, []string{"StreamIdleExpiry", "1h0m0s"}},
		{"stream expiry 1h", func(o *Options) { o.StreamIdleExpiry = time.Hour }, nil},
		{"streams per device 65537", func(o *Options) { o.MaxStreamsPerDevice = 65537 }, []string{"MaxStreamsPerDevice", "65536"}},
		{"streams per device -1", func(o *Options) { o.MaxStreamsPerDevice = -1 }, []string{"MaxStreamsPerDevice"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := Options{DataDir: t.TempDir()}
			c.set(&o)
			o.EnsureDefaults()
			err := o.Validate()
			if c.fields == nil {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidOptions) {
				t.Fatalf("Validate: %v, want ErrInvalidOptions", err)
			}
			for _, f := range c.fields {
				if !strings.Contains(err.Error(), f) {
					t.Errorf("Validate: %v, want it to name %s", err, f)
				}
			}
		})
	}
}
