package natslog

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"

	"edgeflow/wire"
)

// Log is the fleet's log stream, created or checked by EnsureStream.
type Log struct {
	js     jetstream.JetStream
	opts   Options
	stream jetstream.Stream
}

// EnsureStream creates the log's stream, or checks an existing one and
// brings its retention and replica count to opts. It is idempotent and
// safe to run from several hubs at once. An existing stream with another
// partition count is refused with ErrPartitionsChanged, one that captures
// or transforms other subjects with ErrStreamMismatch; neither is changed.
func EnsureStream(ctx context.Context, js jetstream.JetStream, opts Options) (*Log, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	want := streamConfig(opts)
	s, err := js.Stream(ctx, opts.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		s, err = js.CreateStream(ctx, want)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			// Another hub created it first; check theirs like any other.
			s, err = js.Stream(ctx, opts.Stream)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("natslog: stream %s: %w", opts.Stream, err)
	}
	have := s.CachedInfo().Config
	if err := checkLayout(opts, have); err != nil {
		return nil, err
	}
	if tuned, changed := tune(have, want); changed {
		if s, err = js.UpdateStream(ctx, tuned); err != nil {
			return nil, fmt.Errorf("natslog: update stream %s to replicas %d, max age %v, max bytes %d: %w",
				opts.Stream, want.Replicas, want.MaxAge, want.MaxBytes, err)
		}
	}
	return &Log{js: js, opts: opts, stream: s}, nil
}

// streamConfig is the stream opts describe.
func streamConfig(o Options) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        o.Stream,
		Description: "edgeflow: device batches, partitioned by device",
		Subjects:    []string{BatchSubjects},
		SubjectTransform: &jetstream.SubjectTransformConfig{
			Source:      BatchSubjects,
			Destination: transformDest(o.Partitions),
		},
		Retention: jetstream.LimitsPolicy,
		// DiscardNew: a full stream refuses new batches, which agents keep
		// and resend, instead of dropping old ones not yet applied.
		Discard:  jetstream.DiscardNew,
		Storage:  jetstream.FileStorage,
		Replicas: o.Replicas,
		MaxAge:   o.MaxAge,
		MaxBytes: o.MaxBytes,
	}
}

var partitionsRE = regexp.MustCompile(`\{\{\s*partition\(\s*(\d+)\s*,\s*1\s*\)\s*\}\}`)

// checkLayout refuses an existing stream whose subjects, partitioning or
// storage differ from what opts need; these cannot change under data.
func checkLayout(o Options, have jetstream.StreamConfig) error {
	if !slices.Equal(have.Subjects, []string{BatchSubjects}) {
		return fmt.Errorf("%w: stream %s captures %q, want [%q]", ErrStreamMismatch, o.Stream, have.Subjects, BatchSubjects)
	}
	tr := have.SubjectTransform
	if tr == nil {
		return fmt.Errorf("%w: stream %s has no subject transform, want %s -> %s", ErrStreamMismatch, o.Stream, BatchSubjects, transformDest(o.Partitions))
	}
	if tr.Source == BatchSubjects && tr.Destination != transformDest(o.Partitions) {
		if m := partitionsRE.FindStringSubmatch(tr.Destination); m != nil {
			if n, err := strconv.Atoi(m[1]); err == nil && tr.Destination == transformDest(n) {
				return fmt.Errorf("%w: stream %s has %d partitions, configured %d; the count is fixed for a stream's life (it decides each device's partition): configure %d, or create a new stream",
					ErrPartitionsChanged, o.Stream, n, o.Partitions, n)
			}
		}
	}
	if tr.Source != BatchSubjects || tr.Destination != transformDest(o.Partitions) {
		return fmt.Errorf("%w: stream %s transforms %s -> %s, want %s -> %s", ErrStreamMismatch, o.Stream, tr.Source, tr.Destination, BatchSubjects, transformDest(o.Partitions))
	}
	if have.Storage != jetstream.FileStorage {
		return fmt.Errorf("%w: stream %s is in %v storage, want file", ErrStreamMismatch, o.Stream, have.Storage)
	}
	if have.Retention != jetstream.LimitsPolicy {
		return fmt.Errorf("%w: stream %s has retention %v, want limits", ErrStreamMismatch, o.Stream, have.Retention)
	}
	return nil
}

// tune returns have with want's replicas, retention limits and discard
// policy, and whether any of them differed.
func tune(have, want jetstream.StreamConfig) (jetstream.StreamConfig, bool) {
	changed := have.Replicas != want.Replicas || have.MaxAge != want.MaxAge ||
		have.MaxBytes != want.MaxBytes || have.Discard != want.Discard
	have.Replicas, have.MaxAge, have.MaxBytes, have.Discard = want.Replicas, want.MaxAge, want.MaxBytes, want.Discard
	return have, changed
}

// Options returns the options the log was opened with, defaults filled.
func (l *Log) Options() Options { return l.opts }

// Fullness is how much of the stream's byte limit is used.
type Fullness struct {
	// Bytes is what the stream holds; MaxBytes its limit.
	Bytes, MaxBytes uint64
	// Messages is how many messages it holds, FirstSeq..LastSeq their
	// stream sequences.
	Messages, FirstSeq, LastSeq uint64
	// Replicas is the stream's replica count, Current how many of them
	// (its leader included) the leader reports current and online. A
	// leader that has lost its peers may still answer for a while: it
	// holds no quorum then, and writes fail.
	Replicas, Current int
}

// Quorum reports whether a majority of the stream's replicas is current,
// which a write needs.
func (f Fullness) Quorum() bool { return f.Current >= f.Replicas/2+1 }

// Ratio is Bytes/MaxBytes, the value for a fullness gauge: at 1 the stream
// refuses new batches.
func (f Fullness) Ratio() float64 {
	if f.MaxBytes == 0 {
		return 0
	}
	return float64(f.Bytes) / float64(f.MaxBytes)
}

// Fullness asks the stream's leader for its current state.
func (l *Log) Fullness(ctx context.Context) (Fullness, error) {
	info, err := l.stream.Info(ctx)
	if err != nil {
		return Fullness{}, fmt.Errorf("natslog: stream %s info: %w", l.opts.Stream, err)
	}
	st := info.State
	f := Fullness{
		Bytes: st.Bytes, MaxBytes: uint64(max(info.Config.MaxBytes, 0)),
		Messages: st.Msgs, FirstSeq: st.FirstSeq, LastSeq: st.LastSeq,
		Replicas: max(info.Config.Replicas, 1),
	}
	f.Current = f.Replicas // a single server reports no cluster
	if c := info.Cluster; c != nil && f.Replicas > 1 {
		f.Current = 0
		if c.Leader != "" {
			f.Current = 1
		}
		for _, p := range c.Replicas {
			if p != nil && p.Current && !p.Offline {
				f.Current++
			}
		}
	}
	return f, nil
}

// Publish appends data as a batch of device over core JetStream, the way
// tools and tests feed the log without an MQTT client, and returns its
// stream sequence once a quorum holds it. Devices publish over MQTT.
func (l *Log) Publish(ctx context.Context, device string, data []byte, opts ...jetstream.PublishOpt) (uint64, error) {
	if err := wire.ValidateDeviceID(device); err != nil {
		return 0, fmt.Errorf("natslog: publish: %w", err)
	}
	opts = append(opts, jetstream.WithExpectStream(l.opts.Stream))
	ack, err := l.js.Publish(ctx, BatchSubject(device), data, opts...)
	if err != nil {
		return 0, fmt.Errorf("natslog: publish for %s: %w", device, err)
	}
	return ack.Sequence, nil
}
