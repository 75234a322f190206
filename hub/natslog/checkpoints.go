package natslog

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"
)

// CheckpointOptions configure the checkpoint bucket.
type CheckpointOptions struct {
	// Bucket is the KV bucket's name. Default "EDGEFLOW_CHECKPOINTS".
	Bucket string
	// Replicas is how many servers hold it, as for the stream. Default 3;
	// 1..5.
	Replicas int
}

// DefaultCheckpointBucket is CheckpointOptions.Bucket's default.
const DefaultCheckpointBucket = "EDGEFLOW_CHECKPOINTS"

// EnsureDefaults fills zero fields with their defaults.
func (o *CheckpointOptions) EnsureDefaults() {
	if o.Bucket == "" {
		o.Bucket = DefaultCheckpointBucket
	}
	if o.Replicas == 0 {
		o.Replicas = DefaultReplicas
	}
}

// Validate names the first invalid field.
func (o *CheckpointOptions) Validate() error {
	switch {
	case !streamNameRE.MatchString(o.Bucket):
		return fmt.Errorf("%w: Bucket %q: want 1..64 letters, digits, '-' or '_'", ErrInvalidOption, o.Bucket)
	case o.Replicas < 1 || o.Replicas > maxReplicas:
		return fmt.Errorf("%w: Replicas %d: want 1..%d", ErrInvalidOption, o.Replicas, maxReplicas)
	}
	return nil
}

// Checkpoint is one partition's saved state and the log position it
// covers.
type Checkpoint struct {
	Partition int
	// Position is the last stream sequence State includes; a reader
	// resumes at Position+1.
	Position uint64
	// State is the caller's encoded state; opaque here.
	State []byte
	// Revision is the record's KV revision: pass it to Save to replace
	// exactly this record.
	Revision uint64
}

// Checkpoints stores a checkpoint per partition in a JetStream KV bucket.
type Checkpoints struct {
	bucket string
	kv     jetstream.KeyValue
}

// OpenCheckpoints creates the bucket or opens the existing one.
func OpenCheckpoints(ctx context.Context, js jetstream.JetStream, opts CheckpointOptions) (*Checkpoints, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      opts.Bucket,
		Description: "edgeflow: per-partition checkpoints",
		History:     1,
		Replicas:    opts.Replicas,
		Storage:     jetstream.FileStorage,
	})
	if err != nil {
		return nil, fmt.Errorf("natslog: checkpoint bucket %s: %w", opts.Bucket, err)
	}
	return &Checkpoints{bucket: opts.Bucket, kv: kv}, nil
}

// checkPartition bounds a partition number before it becomes a key.
func checkPartition(p int) error {
	if p < 0 || p >= maxPartitions {
		return fmt.Errorf("%w: partition %d: want 0..%d", ErrInvalidOption, p, maxPartitions-1)
	}
	return nil
}

func checkpointKey(p int) string { return "partition." + strconv.Itoa(p) }

// checkpointVersion is the first byte of every stored checkpoint; the
// position follows as 8 bytes big-endian, then the state.
const (
	checkpointVersion = 1
	checkpointHeader  = 9
)

// Load returns partition p's checkpoint, or ErrNoCheckpoint.
func (c *Checkpoints) Load(ctx context.Context, p int) (Checkpoint, error) {
	if err := checkPartition(p); err != nil {
		return Checkpoint{}, err
	}
	e, err := c.kv.Get(ctx, checkpointKey(p))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Checkpoint{Partition: p}, fmt.Errorf("%w for partition %d in %s", ErrNoCheckpoint, p, c.bucket)
	}
	if err != nil {
		return Checkpoint{}, fmt.Errorf("natslog: load checkpoint of partition %d: %w", p, err)
	}
	pos, state, err := decodeCheckpoint(e.Value())
	if err != nil {
		return Checkpoint{}, fmt.Errorf("%w: %s key %s revision %d: %v; delete the key to rebuild the partition from the log",
			ErrCorruptCheckpoint, c.bucket, e.Key(), e.Revision(), err)
	}
	return Checkpoint{Partition: p, Position: pos, State: state, Revision: e.Revision()}, nil
}

// encodeCheckpoint is the stored form of a checkpoint record.
func encodeCheckpoint(position uint64, state []byte) []byte {
	v := make([]byte, checkpointHeader+len(state))
	v[0] = checkpointVersion
	binary.BigEndian.PutUint64(v[1:checkpointHeader], position)
	copy(v[checkpointHeader:], state)
	return v
}

// decodeCheckpoint reverses encodeCheckpoint; the state aliases v.
func decodeCheckpoint(v []byte) (uint64, []byte, error) {
	if len(v) < checkpointHeader {
		return 0, nil, fmt.Errorf("%d bytes, want at least %d", len(v), checkpointHeader)
	}
	if v[0] != checkpointVersion {
		return 0, nil, fmt.Errorf("version %d, want %d", v[0], checkpointVersion)
	}
	return binary.BigEndian.Uint64(v[1:checkpointHeader]), v[checkpointHeader:], nil
}

// Save stores partition p's state at position, replacing the record of
// revision (0: there must be none yet), and returns the new revision. If
// the record has changed since, nothing is written and the error wraps
// ErrCheckpointConflict: another writer owns the partition now. Any other
// error leaves it unknown whether the record was stored (a lost reply); a
// retry that then conflicts must Load and compare before concluding
// another writer saved.
func (c *Checkpoints) Save(ctx context.Context, p int, position uint64, state []byte, revision uint64) (uint64, error) {
	if err := checkPartition(p); err != nil {
		return 0, err
	}
	v := encodeCheckpoint(position, state)
	var rev uint64
	var err error
	if revision == 0 {
		rev, err = c.kv.Create(ctx, checkpointKey(p), v)
	} else {
		rev, err = c.kv.Update(ctx, checkpointKey(p), v, revision)
	}
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return 0, fmt.Errorf("%w: partition %d in %s, expected revision %d", ErrCheckpointConflict, p, c.bucket, revision)
	}
	if err != nil {
		return 0, fmt.Errorf("natslog: save checkpoint of partition %d at %d: %w", p, position, err)
	}
	return rev, nil
}
