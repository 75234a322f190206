package natslog

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// Sentinel errors of PartitionCheckpoints.
var (
	// ErrFenced: the partition has been claimed under a newer epoch than
	// the writer's (or released by it), so the write was refused: the
	// writer is a stale owner and must stop applying the partition.
	ErrFenced = errors.New("natslog: fenced: a newer epoch owns the partition")
	// ErrPartitionCheckpointTooLarge: a Save's data exceeds
	// PartitionCheckpointOptions.MaxBytes.
	ErrPartitionCheckpointTooLarge = errors.New("natslog: partition checkpoint larger than MaxBytes")
)

// PartitionCheckpointOptions configure the fenced per-partition
// checkpoint bucket.
type PartitionCheckpointOptions struct {
	// Bucket is the KV bucket's name. Default "EDGEFLOW_PARTITION_CHECKPOINTS".
	Bucket string
	// Replicas is how many servers hold it. Default 3; 1..5.
	Replicas int
	// MaxBytes bounds one checkpoint's data. It must fit a NATS message
	// with the header (the servers' max_payload, 1 MiB by default);
	// larger state belongs in Snapshots. Default 1 MiB - 64 bytes.
	MaxBytes int
	// Registerer receives edgeflow_hub_fenced_writes_total; nil: not
	// registered (the counter still counts, see FencedWrites).
	Registerer prometheus.Registerer
}

// DefaultPartitionCheckpointBucket is PartitionCheckpointOptions.Bucket's
// default.
const DefaultPartitionCheckpointBucket = "EDGEFLOW_PARTITION_CHECKPOINTS"

// defaultPartitionCheckpointMax leaves room for the record header and the
// message's own overhead under NATS' default 1 MiB max_payload.
const defaultPartitionCheckpointMax = 1<<20 - 64

// EnsureDefaults fills zero fields with their defaults.
func (o *PartitionCheckpointOptions) EnsureDefaults() {
	if o.Bucket == "" {
		o.Bucket = DefaultPartitionCheckpointBucket
	}
	if o.Replicas == 0 {
		o.Replicas = DefaultReplicas
	}
	if o.MaxBytes == 0 {
		o.MaxBytes = defaultPartitionCheckpointMax
	}
}

// Validate names the first invalid field.
func (o *PartitionCheckpointOptions) Validate() error {
	switch {
	case !streamNameRE.MatchString(o.Bucket):
		return fmt.Errorf("%w: Bucket %q: want 1..64 letters, digits, '-' or '_'", ErrInvalidOption, o.Bucket)
	case o.Replicas < 1 || o.Replicas > maxReplicas:
		return fmt.Errorf("%w: Replicas %d: want 1..%d", ErrInvalidOption, o.Replicas, maxReplicas)
	case o.MaxBytes < 1 || o.MaxBytes > 64<<20:
		return fmt.Errorf("%w: MaxBytes %d: want 1..%d", ErrInvalidOption, o.MaxBytes, 64<<20)
	}
	return nil
}

// PartitionCheckpoint is one partition's fenced record: the epoch that
// last claimed it and the data its owner last saved.
type PartitionCheckpoint struct {
	Partition int
	// Epoch is the lease epoch that claimed the partition last.
	Epoch uint64
	// Data is the owner's encoded state (opaque here); nil when the
	// partition was claimed but nothing saved yet.
	Data []byte
	// Released is true once the owner of Epoch released the partition
	// cleanly: Data is its final state under that epoch.
	Released bool
	// Revision is the record's KV revision.
	Revision uint64
}

// PartitionCheckpoints stores one record per partition in a JetStream KV
// bucket, written only by the holder of the newest epoch: Claim raises
// the record's epoch, and Save and Release are compare-and-sets that
// refuse (ErrFenced, counted) a writer whose epoch is no longer the
// record's. Epochs are the lease revisions of hub/lease, which only grow
// for the life of the lease bucket.
type PartitionCheckpoints struct {
	bucket string
	max    int
	kv     jetstream.KeyValue
	fenced prometheus.Counter
	// refused counts this value's fenced writes; fenced may be shared
	// with other values registered on the same registerer.
	refused atomic.Uint64

	mu    sync.Mutex
	known map[int]partRecord // last record read or written, by partition
}

// partRecord is the decoded head of a record and its revision.
type partRecord struct {
	epoch    uint64
	released bool
	hasData  bool
	data     []byte
	revision uint64
}

// OpenPartitionCheckpoints creates the bucket or opens the existing one.
func OpenPartitionCheckpoints(ctx context.Context, js jetstream.JetStream, opts PartitionCheckpointOptions) (*PartitionCheckpoints, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      opts.Bucket,
		Description: "edgeflow: per-partition checkpoints fenced by lease epoch",
		History:     1,
		Replicas:    opts.Replicas,
		Storage:     jetstream.FileStorage,
	})
	if err != nil {
		return nil, fmt.Errorf("natslog: partition checkpoint bucket %s: %w", opts.Bucket, err)
	}
	fenced := prometheus.NewCounter(prometheus.CounterOpts{Namespace: "edgeflow", Subsystem: "hub", Name: "fenced_writes_total",
		Help: "Cluster mode: partition checkpoint writes refused because a newer lease epoch had claimed the partition (a stale owner's write)."})
	if opts.Registerer != nil {
		if err := opts.Registerer.Register(fenced); err != nil {
			are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err)
			if !ok {
				return nil, fmt.Errorf("natslog: register fenced writes metric: %w", err)
			}
			fenced = are.ExistingCollector.(prometheus.Counter)
		}
	}
	return &PartitionCheckpoints{bucket: opts.Bucket, max: opts.MaxBytes, kv: kv, fenced: fenced, known: map[int]partRecord{}}, nil
}

// FencedWrites is how many writes this value has refused with ErrFenced.
func (c *PartitionCheckpoints) FencedWrites() uint64 {
	return c.refused.Load()
}

// Record layout: version, flags, epoch (8 bytes big-endian), data.
const (
	partRecordVersion = 1
	partRecordHeader  = 10
	partFlagReleased  = 1
	partFlagData      = 2
)

func encodePartRecord(r partRecord) []byte {
	v := make([]byte, partRecordHeader+len(r.data))
	v[0] = partRecordVersion
	if r.released {
		v[1] |= partFlagReleased
	}
	if r.hasData {
		v[1] |= partFlagData
	}
	binary.BigEndian.PutUint64(v[2:partRecordHeader], r.epoch)
	copy(v[partRecordHeader:], r.data)
	return v
}

func decodePartRecord(v []byte) (partRecord, error) {
	if len(v) < partRecordHeader {
		return partRecord{}, fmt.Errorf("%d bytes, want at least %d", len(v), partRecordHeader)
	}
	if v[0] != partRecordVersion {
		return partRecord{}, fmt.Errorf("version %d, want %d", v[0], partRecordVersion)
	}
	if v[1]&^(partFlagReleased|partFlagData) != 0 {
		return partRecord{}, fmt.Errorf("unknown flags %#x", v[1])
	}
	r := partRecord{
		epoch:    binary.BigEndian.Uint64(v[2:partRecordHeader]),
		released: v[1]&partFlagReleased != 0,
		hasData:  v[1]&partFlagData != 0,
	}
	if r.hasData {
		r.data = v[partRecordHeader:]
	}
	return r, nil
}

// read fetches partition p's record; found is false when there is none.
func (c *PartitionCheckpoints) read(ctx context.Context, p int) (partRecord, bool, error) {
	e, err := c.kv.Get(ctx, checkpointKey(p))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return partRecord{}, false, nil
	}
	if err != nil {
		return partRecord{}, false, fmt.Errorf("natslog: read partition %d checkpoint: %w", p, err)
	}
	r, err := decodePartRecord(e.Value())
	if err != nil {
		return partRecord{}, false, fmt.Errorf("%w: %s key %s revision %d: %v; delete the key to rebuild the partition from the log",
			ErrCorruptCheckpoint, c.bucket, e.Key(), e.Revision(), err)
	}
	r.revision = e.Revision()
	return r, true, nil
}

// write stores r, replacing the record of revision (0: none yet), and
// reports a lost compare-and-set as conflict rather than an error.
func (c *PartitionCheckpoints) write(ctx context.Context, p int, r partRecord, revision uint64) (rev uint64, conflict bool, err error) {
	v := encodePartRecord(r)
	if revision == 0 {
		rev, err = c.kv.Create(ctx, checkpointKey(p), v)
	} else {
		rev, err = c.kv.Update(ctx, checkpointKey(p), v, revision)
	}
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return 0, true, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("natslog: write partition %d checkpoint: %w", p, err)
	}
	return rev, false, nil
}

// fence counts a refused write and builds its error.
func (c *PartitionCheckpoints) fence(p int, epoch uint64, r partRecord, op string) error {
	c.fenced.Inc()
	c.refused.Add(1)
	if r.epoch == epoch && r.released {
		return fmt.Errorf("%w: %s of partition %d at epoch %d: that epoch released it", ErrFenced, op, p, epoch)
	}
	return fmt.Errorf("%w: %s of partition %d at epoch %d: record is at epoch %d", ErrFenced, op, p, epoch, r.epoch)
}

// maxCASRetries bounds the retries of a compare-and-set lost to a write
// of the same epoch (a reply lost and the write retried).
const maxCASRetries = 5

// Claim makes epoch the partition's current epoch, keeping the data the
// previous owner saved; it fails with ErrFenced when the record already
// has a newer epoch. Claiming the current epoch again is a no-op, so a
// retry after a lost reply is safe.
func (c *PartitionCheckpoints) Claim(ctx context.Context, p int, epoch uint64) error {
	if err := checkPartition(p); err != nil {
		return err
	}
	if epoch == 0 {
		return fmt.Errorf("%w: epoch 0 (epochs start at 1)", ErrInvalidOption)
	}
	for range maxCASRetries {
		cur, found, err := c.read(ctx, p)
		if err != nil {
			return err
		}
		switch {
		case found && cur.epoch > epoch:
			return c.fence(p, epoch, cur, "claim")
		case found && cur.epoch == epoch:
			c.remember(p, cur)
			return nil
		}
		next := partRecord{epoch: epoch, hasData: cur.hasData, data: cur.data}
		rev, conflict, err := c.write(ctx, p, next, cur.revision)
		if err != nil {
			return err
		}
		if !conflict {
			next.revision = rev
			c.remember(p, next)
			return nil
		}
	}
	return fmt.Errorf("natslog: claim partition %d at epoch %d: record kept changing under %d attempts", p, epoch, maxCASRetries)
}

// Save replaces partition p's data if epoch is still the record's epoch
// and not released; otherwise nothing is written and the error wraps
// ErrFenced (counted). Any other error leaves it unknown whether the data
// was stored; Save again.
func (c *PartitionCheckpoints) Save(ctx context.Context, p int, epoch uint64, data []byte) error {
	if err := checkPartition(p); err != nil {
		return err
	}
	if len(data) > c.max {
		return fmt.Errorf("%w: partition %d: %d bytes, MaxBytes %d", ErrPartitionCheckpointTooLarge, p, len(data), c.max)
	}
	return c.casLoop(ctx, p, epoch, "save", func() partRecord {
		return partRecord{epoch: epoch, hasData: true, data: data}
	})
}

// Release marks the partition released by epoch, keeping its last saved
// data as the final state of that epoch: after it, writes of epoch are
// fenced, and the next owner's Load sees Released. A stale epoch gets
// ErrFenced.
func (c *PartitionCheckpoints) Release(ctx context.Context, p int, epoch uint64) error {
	if err := checkPartition(p); err != nil {
		return err
	}
	var last partRecord
	err := c.casLoop(ctx, p, epoch, "release", func() partRecord {
		return partRecord{epoch: epoch, released: true, hasData: last.hasData, data: last.data}
	}, &last)
	return err
}

// casLoop writes next() over partition p's record while the record's
// epoch is epoch and not released. If cur is given it receives the
// record the write replaces before next is called.
func (c *PartitionCheckpoints) casLoop(ctx context.Context, p int, epoch uint64, op string, next func() partRecord, cur ...*partRecord) error {
	c.mu.Lock()
	r, ok := c.known[p]
	c.mu.Unlock()
	fresh := false
	for range maxCASRetries {
		if !ok || r.epoch != epoch || len(cur) > 0 && !fresh {
			var found bool
			var err error
			if r, found, err = c.read(ctx, p); err != nil {
				return err
			}
			fresh = true
			if !found {
				return c.fence(p, epoch, r, op+" (never claimed)")
			}
		}
		if r.epoch != epoch || r.released {
			return c.fence(p, epoch, r, op)
		}
		if len(cur) > 0 {
			*cur[0] = r
		}
		n := next()
		rev, conflict, err := c.write(ctx, p, n, r.revision)
		if err != nil {
			return err
		}
		if !conflict {
			n.revision = rev
			c.remember(p, n)
			return nil
		}
		ok = false // re-read: a newer epoch may have claimed it
	}
	return fmt.Errorf("natslog: %s partition %d at epoch %d: record kept changing under %d attempts", op, p, epoch, maxCASRetries)
}

// remember caches the head of the record last seen for p, so a Save of
// the same epoch needs no read first. Data is not kept.
func (c *PartitionCheckpoints) remember(p int, r partRecord) {
	r.data = nil
	c.mu.Lock()
	c.known[p] = r
	c.mu.Unlock()
}

// Load returns partition p's record, or ErrNoCheckpoint when it was never
// claimed.
func (c *PartitionCheckpoints) Load(ctx context.Context, p int) (PartitionCheckpoint, error) {
	if err := checkPartition(p); err != nil {
		return PartitionCheckpoint{}, err
	}
	r, found, err := c.read(ctx, p)
	if err != nil {
		return PartitionCheckpoint{}, err
	}
	if !found {
		return PartitionCheckpoint{Partition: p}, fmt.Errorf("%w for partition %d in %s", ErrNoCheckpoint, p, c.bucket)
	}
	return PartitionCheckpoint{Partition: p, Epoch: r.epoch, Data: r.data, Released: r.released, Revision: r.revision}, nil
}
