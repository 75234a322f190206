package lease

import (
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Clock is the time source of a Manager. Now must carry a monotonic
// reading (time.Now does) so that wall-clock steps do not move it; a
// reading earlier than the previous one is treated as a clock fault and
// ends every ownership.
type Clock interface {
	Now() time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// SystemClock is the default Clock: time.Now, whose monotonic reading is
// immune to wall-clock steps.
var SystemClock Clock = systemClock{}

// Reason says why a partition was lost.
type Reason string

// Reasons given to Callbacks.Lost.
const (
	// ReasonExpired: no renewal succeeded within TTL/2 (KV unavailable,
	// or the process was paused); the lease may be taken by now.
	ReasonExpired Reason = "not renewed within TTL/2"
	// ReasonTaken: a renewal found the lease changed or gone: another
	// hub may own it.
	ReasonTaken Reason = "lease changed or gone"
	// ReasonClock: the clock moved backwards, so no deadline can be
	// trusted.
	ReasonClock Reason = "clock moved backwards"
	// ReasonStopped: Run ended without a clean Stop; the leases are left
	// to expire.
	ReasonStopped Reason = "manager stopped without handover"
	// ReasonDuplicate: another hub took this hub's heartbeat key (same
	// id); this one stops.
	ReasonDuplicate Reason = "duplicate hub id"
)

// Callbacks tell the owner of a Manager about ownership changes. They run
// on the manager's goroutine, one at a time, and must return promptly
// (Handoff may take as long as a checkpoint takes).
type Callbacks struct {
	// Acquired: this hub owns partition p under epoch from now on; claim
	// the partition's checkpoint with epoch, restore and replay.
	Acquired func(p int, epoch uint64)
	// Lost: this hub no longer owns p (it may already be another's):
	// stop applying it and drop its state at once.
	Lost func(p int, epoch uint64, reason Reason)
	// Handoff: p is about to be released cleanly (rebalance or Stop):
	// stop applying it and write its final checkpoint under epoch. When
	// it returns the lease is deleted and ownership has ended; Lost is
	// not called for a clean release. No renewal runs while it does, so
	// it must finish well within TTL/2; past that every ownership has
	// ended (Owns is false) and Lost follows.
	Handoff func(p int, epoch uint64)
}

// Options configure a Manager.
type Options struct {
	// HubID names this hub among the hubs of the stream: 1..64 letters,
	// digits, '-' or '_'. Required.
	HubID string
	// Partitions is the stream's partition count. Required, 1..4096.
	Partitions int
	// URL is the base URL of this hub's HTTP API as the other hubs reach
	// it (e.g. http://hub-a:8080), written in the heartbeat so every hub
	// learns where to ask its peers (CheckURL says what is valid).
	// Default "": the hub is not reachable by its peers, and answers for
	// its partitions are missing from theirs.
	URL string
	// TTL is how long the server keeps a lease or heartbeat nobody
	// renews (the bucket's MaxAge). A hub believes it owns a partition
	// for TTL/2 after its last successful renewal; a dead hub's
	// partitions are taken over about TTL after it died. Default 4s; at least
	// 1s (the server's delete-marker minimum).
	TTL time.Duration
	// Renew is the interval of renewals and balancing. Default TTL/6; at
	// most TTL/4, so several renewals can fail before ownership ends.
	Renew time.Duration
	// Grace is how long a partition must stay free before a hub it is
	// not assigned to takes it. Default TTL.
	Grace time.Duration
	// Bucket is the KV bucket's name. Default "EDGEFLOW_LEASES".
	Bucket string
	// Replicas is how many servers hold the bucket. Default 3; 1..5.
	Replicas int
	// Clock is the time source. Default SystemClock.
	Clock Clock
	// Logger receives ownership changes and errors. Default slog.Default().
	Logger *slog.Logger
	// Registerer receives the lease metrics; nil: not registered.
	Registerer prometheus.Registerer
	// Callbacks tell the owner about ownership changes; nil fields are
	// skipped.
	Callbacks Callbacks
}

// DefaultBucket is Options.Bucket's default.
const DefaultBucket = "EDGEFLOW_LEASES"

// DefaultTTL is Options.TTL's default.
const DefaultTTL = 4 * time.Second

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// maxPartitions matches natslog's partition bound.
const maxPartitions = 4096

// EnsureDefaults fills zero fields with their defaults.
func (o *Options) EnsureDefaults() {
	if o.TTL == 0 {
		o.TTL = DefaultTTL
	}
	if o.Renew == 0 {
		o.Renew = o.TTL / 6
	}
	if o.Grace == 0 {
		o.Grace = o.TTL
	}
	if o.Bucket == "" {
		o.Bucket = DefaultBucket
	}
	if o.Replicas == 0 {
		o.Replicas = 3
	}
	if o.Clock == nil {
		o.Clock = SystemClock
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Validate names the first invalid field.
func (o *Options) Validate() error {
	switch {
	case !nameRE.MatchString(o.HubID):
		return fmt.Errorf("%w: HubID %q: want 1..64 letters, digits, '-' or '_'", ErrInvalidOption, o.HubID)
	case o.Partitions < 1 || o.Partitions > maxPartitions:
		return fmt.Errorf("%w: Partitions %d: want 1..%d", ErrInvalidOption, o.Partitions, maxPartitions)
	case o.TTL < time.Second:
		return fmt.Errorf("%w: TTL %v: want at least 1s", ErrInvalidOption, o.TTL)
	case o.Renew <= 0 || o.Renew > o.TTL/4:
		return fmt.Errorf("%w: Renew %v: want more than 0 and at most TTL/4 (%v)", ErrInvalidOption, o.Renew, o.TTL/4)
	case o.Grace < 0:
		return fmt.Errorf("%w: Grace %v: want 0 or more", ErrInvalidOption, o.Grace)
	case !nameRE.MatchString(o.Bucket):
		return fmt.Errorf("%w: Bucket %q: want 1..64 letters, digits, '-' or '_'", ErrInvalidOption, o.Bucket)
	case o.Replicas < 1 || o.Replicas > 5:
		return fmt.Errorf("%w: Replicas %d: want 1..5", ErrInvalidOption, o.Replicas)
	}
	if o.URL != "" {
		if err := CheckURL(o.URL); err != nil {
			return fmt.Errorf("%w: URL: %v", ErrInvalidOption, err)
		}
	}
	return nil
}

// MaxURL bounds Options.URL, so a heartbeat record stays within the
// bound every hub reads records with.
const MaxURL = 512

// CheckURL reports why u cannot be a hub's advertised base URL: it must
// be an absolute http or https URL with a host, at most MaxURL bytes of
// printable ASCII other than '"', '\', '<', '>' and '&' (so its JSON
// encoding is itself and the record bound holds), without user
// information (every hub reads the heartbeat), query or fragment. A path
// prefix (a reverse proxy's) is allowed.
func CheckURL(u string) error {
	if len(u) > MaxURL {
		return fmt.Errorf("%d bytes, want at most %d", len(u), MaxURL)
	}
	for i := 0; i < len(u); i++ {
		if c := u[i]; c <= ' ' || c > '~' || strings.IndexByte(`"\<>&`, c) >= 0 {
			return fmt.Errorf("%q: byte %d (%q) is not allowed in an advertised URL", u, i, c)
		}
	}
	p, err := url.Parse(u)
	switch {
	case err != nil:
		return fmt.Errorf("%q: %v", u, err)
	case p.Scheme != "http" && p.Scheme != "https":
		return fmt.Errorf("%q: want an absolute http:// or https:// URL", u)
	case p.Host == "" || p.Hostname() == "":
		return fmt.Errorf("%q: no host", u)
	case p.User != nil:
		return fmt.Errorf("%q: user information is not allowed (every hub reads it)", u)
	case p.RawQuery != "" || p.ForceQuery || p.Fragment != "":
		return fmt.Errorf("%q: a query or fragment is not allowed", u)
	}
	return nil
}
