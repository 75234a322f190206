package natslog

import (
	"fmt"
	"regexp"
	"time"
)

// Options configure the log's stream. The zero value plus EnsureDefaults
// is the production layout.
type Options struct {
	// Stream is the JetStream stream's name. Default "EDGEFLOW".
	Stream string
	// Partitions is how many partitions devices are hashed into, fixed
	// for the stream's life. Default 64; 1..1024.
	Partitions int
	// Replicas is how many servers hold each message; a write needs a
	// majority of them. Default 3; 1..5 (JetStream's limit).
	Replicas int
	// MaxAge removes messages older than this, applied or not. Default
	// 7 days; at least one minute.
	MaxAge time.Duration
	// MaxBytes bounds the stream's size on each replica in bytes; when it
	// is reached new batches are refused, not old ones dropped. Default
	// 1 GiB; at least 1 MiB.
	MaxBytes int64
}

// Defaults of Options.
const (
	DefaultStream     = "EDGEFLOW"
	DefaultPartitions = 64
	DefaultReplicas   = 3
	DefaultMaxAge     = 7 * 24 * time.Hour
	DefaultMaxBytes   = 1 << 30

	maxPartitions = 1024
	maxReplicas   = 5
)

// EnsureDefaults fills zero fields with their defaults.
func (o *Options) EnsureDefaults() {
	if o.Stream == "" {
		o.Stream = DefaultStream
	}
	if o.Partitions == 0 {
		o.Partitions = DefaultPartitions
	}
	if o.Replicas == 0 {
		o.Replicas = DefaultReplicas
	}
	if o.MaxAge == 0 {
		o.MaxAge = DefaultMaxAge
	}
	if o.MaxBytes == 0 {
		o.MaxBytes = DefaultMaxBytes
	}
}

// streamNameRE is what JetStream accepts as a stream name that is also
// safe in a file name: letters, digits, '-' and '_'.
var streamNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// Validate names the first invalid field.
func (o *Options) Validate() error {
	switch {
	case !streamNameRE.MatchString(o.Stream):
		return fmt.Errorf("%w: Stream %q: want 1..64 letters, digits, '-' or '_'", ErrInvalidOption, o.Stream)
	case o.Partitions < 1 || o.Partitions > maxPartitions:
		return fmt.Errorf("%w: Partitions %d: want 1..%d", ErrInvalidOption, o.Partitions, maxPartitions)
	case o.Replicas < 1 || o.Replicas > maxReplicas:
		return fmt.Errorf("%w: Replicas %d: want 1..%d", ErrInvalidOption, o.Replicas, maxReplicas)
	case o.MaxAge < time.Minute:
		return fmt.Errorf("%w: MaxAge %v: want at least 1m", ErrInvalidOption, o.MaxAge)
	case o.MaxBytes < 1<<20:
		return fmt.Errorf("%w: MaxBytes %d: want at least 1 MiB", ErrInvalidOption, o.MaxBytes)
	}
	return nil
}
