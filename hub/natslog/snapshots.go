package natslog

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// SnapshotOptions configure the snapshot store.
type SnapshotOptions struct {
	// Bucket is the Object Store bucket's name; the pointer to the latest
	// snapshot lives in the KV bucket Bucket+"_HEAD". Default
	// "EDGEFLOW_SNAPSHOTS"; 1..59 letters, digits, '-' or '_'.
	Bucket string
	// Replicas is how many servers hold both buckets. Default 3; 1..5.
	Replicas int
	// MaxBytes bounds one snapshot's stored size (state plus a header
	// of under 20 bytes per partition); Put refuses a larger one and
	// Latest refuses to read one before allocating. The Object Store
	// bucket is bounded to (Keep+2) such snapshots plus chunk overhead.
	// Default 256 MiB; at least 1 MiB.
	MaxBytes int64
	// Keep is how many generations stay stored: the latest and Keep-1
	// older ones Latest can fall back to. Default 2; 1..16.
	Keep int
}

// Defaults and bounds of SnapshotOptions.
const (
	DefaultSnapshotBucket   = "EDGEFLOW_SNAPSHOTS"
	DefaultSnapshotMaxBytes = 256 << 20
	DefaultSnapshotKeep     = 2

	maxSnapshotKeep = 16
	// maxHubID bounds Snapshot.Hub.
	maxHubID = 255
	// headKey is the pointer's key in the head bucket.
	headKey = "latest"
)

var snapshotBucketRE = streamNameRE

// EnsureDefaults fills zero fields with their defaults.
func (o *SnapshotOptions) EnsureDefaults() {
	if o.Bucket == "" {
		o.Bucket = DefaultSnapshotBucket
	}
	if o.Replicas == 0 {
		o.Replicas = DefaultReplicas
	}
	if o.MaxBytes == 0 {
		o.MaxBytes = DefaultSnapshotMaxBytes
	}
	if o.Keep == 0 {
		o.Keep = DefaultSnapshotKeep
	}
}

// Validate names the first invalid field.
func (o *SnapshotOptions) Validate() error {
	switch {
	case !snapshotBucketRE.MatchString(o.Bucket) || len(o.Bucket) > 59:
		return fmt.Errorf("%w: Bucket %q: want 1..59 letters, digits, '-' or '_'", ErrInvalidOption, o.Bucket)
	case o.Replicas < 1 || o.Replicas > maxReplicas:
		return fmt.Errorf("%w: Replicas %d: want 1..%d", ErrInvalidOption, o.Replicas, maxReplicas)
	case o.MaxBytes < 1<<20:
		return fmt.Errorf("%w: MaxBytes %d: want at least 1 MiB", ErrInvalidOption, o.MaxBytes)
	case o.Keep < 1 || o.Keep > maxSnapshotKeep:
		return fmt.Errorf("%w: Keep %d: want 1..%d", ErrInvalidOption, o.Keep, maxSnapshotKeep)
	}
	return nil
}

// bucketBytes is the Object Store bucket's MaxBytes: Keep snapshots, one
// being written, one a writer left behind when it died before moving the
// pointer (Put deletes it once the pointer has passed its generation),
// and the chunk messages' headers (well under 1% at the 128 KiB chunk
// size) plus the objects' metadata.
func (o *SnapshotOptions) bucketBytes() int64 {
	per := o.MaxBytes + o.MaxBytes/64 + 64<<10
	return int64(o.Keep+2) * per
}

// Snapshot is the hub's whole state and the log positions it covers.
type Snapshot struct {
	// Positions is, per partition, the last stream sequence State
	// includes; a reader resumes at Positions[p]+1. Partitions 0..1023.
	Positions map[int]uint64
	// State is the hub's encoded state; opaque here.
	State []byte
	// Taken is when the state was captured, stored to the nanosecond
	// (years 1678 to 2262); a zero Taken reads back as zero.
	Taken time.Time
	// Hub names the writer, at most 255 bytes.
	Hub string
	// Generation numbers snapshots 1, 2, 3... On Put it is the
	// generation the writer expects to be the latest (the one Latest
	// returned or its previous Put assigned; 0 when none exists): Put
	// refuses with ErrSnapshotConflict if another writer moved it. Latest
	// returns the generation it read.
	Generation uint64
}

// SnapshotFallbackError is returned by Latest together with a usable
// older snapshot when the newest generation (and possibly others) could
// not be read. Head is the pointer's generation, the one a following Put
// must name as Snapshot.Generation.
type SnapshotFallbackError struct {
	Head, Used uint64
	// Cause says why each newer generation was skipped; it wraps
	// ErrCorruptSnapshot or ErrSnapshotMissing.
	Cause error
}

func (e *SnapshotFallbackError) Error() string {
	return fmt.Sprintf("natslog: fell back to snapshot generation %d of latest %d: %v", e.Used, e.Head, e.Cause)
}

// Unwrap lets errors.Is find ErrSnapshotFallback and the cause's
// sentinels.
func (e *SnapshotFallbackError) Unwrap() []error { return []error{ErrSnapshotFallback, e.Cause} }

// SnapshotStats counts what Snapshots found wrong; each is a counter
// since OpenSnapshots.
type SnapshotStats struct {
	// Unreadable counts generations Latest found corrupt or missing.
	Unreadable uint64
	// Fallbacks counts Latest calls that returned an older generation.
	Fallbacks uint64
	// PruneErrors counts old or orphaned objects Put failed to delete
	// (they are retried on the next Put).
	PruneErrors uint64
}

// Snapshots keeps the hub's state checkpoint in a JetStream Object Store
// bucket, which holds objects larger than a KV value or a message may be,
// with a pointer to the latest generation in a KV bucket. A snapshot
// becomes visible only when the pointer moves to it, after its object is
// completely stored, and the pointer moves only by compare-and-set on its
// revision, so of two writers that read the same generation one wins.
type Snapshots struct {
	opts  SnapshotOptions
	obs   jetstream.ObjectStore
	head  jetstream.KeyValue
	js    jetstream.JetStream
	stats struct{ unreadable, fallbacks, pruneErrors atomic.Uint64 }
	// afterHead, when set (by a test), runs in Latest between reading the
	// pointer and reading the objects it names.
	afterHead func()
}

// OpenSnapshots creates both buckets or opens (and retunes) existing ones.
func OpenSnapshots(ctx context.Context, js jetstream.JetStream, opts SnapshotOptions) (*Snapshots, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	obs, err := js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket:      opts.Bucket,
		Description: "edgeflow: hub state snapshots",
		Replicas:    opts.Replicas,
		MaxBytes:    opts.bucketBytes(),
		Storage:     jetstream.FileStorage,
	})
	if err != nil {
		return nil, fmt.Errorf("natslog: snapshot bucket %s: %w", opts.Bucket, err)
	}
	head, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      opts.Bucket + "_HEAD",
		Description: "edgeflow: latest hub state snapshot",
		History:     1,
		Replicas:    opts.Replicas,
		Storage:     jetstream.FileStorage,
	})
	if err != nil {
		return nil, fmt.Errorf("natslog: snapshot pointer bucket %s_HEAD: %w", opts.Bucket, err)
	}
	return &Snapshots{opts: opts, obs: obs, head: head, js: js}, nil
}

// Stats returns the counters of what was found wrong.
func (s *Snapshots) Stats() SnapshotStats {
	return SnapshotStats{
		Unreadable:  s.stats.unreadable.Load(),
		Fallbacks:   s.stats.fallbacks.Load(),
		PruneErrors: s.stats.pruneErrors.Load(),
	}
}

// headEntry is one kept generation as the pointer records it.
type headEntry struct {
	gen  uint64
	size uint64
	sum  [sha256.Size]byte
	name string
}

// The pointer's encoding: a version byte, the entry count (1..16), then
// per entry, newest first, the generation and size (8 bytes big-endian
// each), the SHA-256 of the object's bytes, a name length byte and the
// object's name.
const (
	headVersion    = 1
	headEntryFixed = 8 + 8 + sha256.Size + 1
)

func encodeHead(entries []headEntry) []byte {
	b := []byte{headVersion, byte(len(entries))}
	for _, e := range entries {
		b = binary.BigEndian.AppendUint64(b, e.gen)
		b = binary.BigEndian.AppendUint64(b, e.size)
		b = append(b, e.sum[:]...)
		b = append(b, byte(len(e.name)))
		b = append(b, e.name...)
	}
	return b
}

func decodeHead(b []byte) ([]headEntry, error) {
	if len(b) < 2 {
		return nil, fmt.Errorf("%d bytes, want at least 2", len(b))
	}
	if b[0] != headVersion {
		return nil, fmt.Errorf("version %d, want %d", b[0], headVersion)
	}
	n := int(b[1])
	if n < 1 || n > maxSnapshotKeep {
		return nil, fmt.Errorf("%d entries, want 1..%d", n, maxSnapshotKeep)
	}
	b = b[2:]
	entries := make([]headEntry, n)
	for i := range entries {
		if len(b) < headEntryFixed {
			return nil, fmt.Errorf("entry %d: %d bytes left, want at least %d", i, len(b), headEntryFixed)
		}
		e := &entries[i]
		e.gen = binary.BigEndian.Uint64(b)
		e.size = binary.BigEndian.Uint64(b[8:])
		copy(e.sum[:], b[16:16+sha256.Size])
		nl := int(b[headEntryFixed-1])
		b = b[headEntryFixed:]
		if nl == 0 || nl > len(b) {
			return nil, fmt.Errorf("entry %d: name of %d bytes, %d left", i, nl, len(b))
		}
		e.name = string(b[:nl])
		b = b[nl:]
		if i > 0 && e.gen >= entries[i-1].gen {
			return nil, fmt.Errorf("entry %d: generation %d not below %d", i, e.gen, entries[i-1].gen)
		}
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%d bytes after the last entry", len(b))
	}
	return entries, nil
}

// readHead returns the kept generations, newest first, and the pointer's
// revision; no pointer yet is (nil, 0, nil).
func (s *Snapshots) readHead(ctx context.Context) ([]headEntry, uint64, error) {
	e, err := s.head.Get(ctx, headKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("natslog: read snapshot pointer %s_HEAD: %w", s.opts.Bucket, err)
	}
	entries, err := decodeHead(e.Value())
	if err != nil {
		return nil, 0, fmt.Errorf("%w: pointer %s_HEAD key %s revision %d: %v; delete the key to start over from the log",
			ErrCorruptSnapshot, s.opts.Bucket, headKey, e.Revision(), err)
	}
	return entries, e.Revision(), nil
}

// The object's encoding: "EFSN", a version byte, the generation (8 bytes
// big-endian), Taken in Unix nanoseconds (8 bytes), the hub id's length
// (1 byte) and bytes, the position count (uvarint, at most 1024), per
// position the partition and sequence (uvarints, partitions increasing),
// the state's length (uvarint, equal to what remains) and the state.
const (
	snapMagic   = "EFSN"
	snapVersion = 1
)

func encodeSnapshotHeader(gen uint64, snap *Snapshot) []byte {
	b := make([]byte, 0, 64+len(snap.Hub)+len(snap.Positions)*12)
	b = append(b, snapMagic...)
	b = append(b, snapVersion)
	b = binary.BigEndian.AppendUint64(b, gen)
	var taken int64 // 0: Taken is the zero time
	if !snap.Taken.IsZero() {
		taken = snap.Taken.UnixNano()
	}
	b = binary.BigEndian.AppendUint64(b, uint64(taken))
	b = append(b, byte(len(snap.Hub)))
	b = append(b, snap.Hub...)
	b = binary.AppendUvarint(b, uint64(len(snap.Positions)))
	for p := 0; p < maxPartitions; p++ {
		if seq, ok := snap.Positions[p]; ok {
			b = binary.AppendUvarint(b, uint64(p))
			b = binary.AppendUvarint(b, seq)
		}
	}
	return binary.AppendUvarint(b, uint64(len(snap.State)))
}

// decodeSnapshot reverses the encoding; State aliases b.
func decodeSnapshot(b []byte) (Snapshot, error) {
	var snap Snapshot
	fixed := len(snapMagic) + 1 + 8 + 8 + 1
	if len(b) < fixed {
		return snap, fmt.Errorf("%d bytes, want at least %d", len(b), fixed)
	}
	if string(b[:4]) != snapMagic {
		return snap, fmt.Errorf("magic %q, want %q", b[:4], snapMagic)
	}
	if b[4] != snapVersion {
		return snap, fmt.Errorf("version %d, want %d", b[4], snapVersion)
	}
	snap.Generation = binary.BigEndian.Uint64(b[5:])
	if taken := int64(binary.BigEndian.Uint64(b[13:])); taken != 0 {
		snap.Taken = time.Unix(0, taken).UTC()
	}
	hl := int(b[21])
	b = b[fixed:]
	if hl > len(b) {
		return snap, fmt.Errorf("hub id of %d bytes, %d left", hl, len(b))
	}
	snap.Hub = string(b[:hl])
	b = b[hl:]
	uv := func(what string) (uint64, error) {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, fmt.Errorf("%s: bad varint", what)
		}
		b = b[n:]
		return v, nil
	}
	np, err := uv("position count")
	if err != nil {
		return snap, err
	}
	if np > maxPartitions {
		return snap, fmt.Errorf("%d positions, want at most %d", np, maxPartitions)
	}
	snap.Positions = make(map[int]uint64, np)
	last := -1
	for i := uint64(0); i < np; i++ {
		p, err := uv("partition")
		if err != nil {
			return snap, err
		}
		if p >= maxPartitions || int(p) <= last {
			return snap, fmt.Errorf("position %d: partition %d out of order or above %d", i, p, maxPartitions-1)
		}
		seq, err := uv("sequence")
		if err != nil {
			return snap, err
		}
		last = int(p)
		snap.Positions[last] = seq
	}
	sl, err := uv("state length")
	if err != nil {
		return snap, err
	}
	if sl != uint64(len(b)) {
		return snap, fmt.Errorf("state of %d bytes recorded, %d stored", sl, len(b))
	}
	snap.State = b
	return snap, nil
}

// objectName is a new object's name: the generation (zero-padded, so
// names sort by it) and a random suffix, so two writers that both write
// generation g never share an object.
func objectName(gen uint64) (string, error) {
	var r [8]byte
	if _, err := rand.Read(r[:]); err != nil {
		return "", err
	}
	return fmt.Sprintf("snapshot-%020d-%s", gen, hex.EncodeToString(r[:])), nil
}

// objectGeneration parses objectName's generation; ok false for a name
// Snapshots did not write.
func objectGeneration(name string) (uint64, bool) {
	rest, ok := strings.CutPrefix(name, "snapshot-")
	if !ok || len(rest) < 21 || rest[20] != '-' {
		return 0, false
	}
	g, err := strconv.ParseUint(rest[:20], 10, 64)
	return g, err == nil
}

// Put stores snap as the next generation and makes it the latest, then
// deletes generations beyond Keep. snap.Generation must be the latest
// generation (0 when there is none), else ErrSnapshotConflict and nothing
// becomes visible; if another writer moves the pointer while this one
// writes its object, the same. Any other error leaves it unknown whether
// the pointer moved (a reply lost in a leader election): Latest tells.
func (s *Snapshots) Put(ctx context.Context, snap Snapshot) (uint64, error) {
	if len(snap.Hub) > maxHubID {
		return 0, fmt.Errorf("%w: Hub of %d bytes, want at most %d", ErrInvalidSnapshot, len(snap.Hub), maxHubID)
	}
	for p := range snap.Positions {
		if p < 0 || p >= maxPartitions {
			return 0, fmt.Errorf("%w: Positions has partition %d, want 0..%d", ErrInvalidSnapshot, p, maxPartitions-1)
		}
	}
	entries, rev, err := s.readHead(ctx)
	if err != nil {
		return 0, err
	}
	var cur uint64
	if len(entries) > 0 {
		cur = entries[0].gen
	}
	if snap.Generation != cur {
		return 0, fmt.Errorf("%w: %s: writer expected generation %d, latest is %d", ErrSnapshotConflict, s.opts.Bucket, snap.Generation, cur)
	}
	gen := cur + 1
	if len(entries) > 0 {
		// Make room first: objects of generations up to cur that the
		// pointer does not name can never become visible.
		s.prune(ctx, entries)
	}
	header := encodeSnapshotHeader(gen, &snap)
	size := uint64(len(header)) + uint64(len(snap.State))
	if size > uint64(s.opts.MaxBytes) {
		return 0, fmt.Errorf("%w: generation %d is %d bytes, MaxBytes %d", ErrSnapshotTooLarge, gen, size, s.opts.MaxBytes)
	}
	name, err := objectName(gen)
	if err != nil {
		return 0, fmt.Errorf("natslog: snapshot name: %w", err)
	}
	body := fullReader{io.MultiReader(bytes.NewReader(header), bytes.NewReader(snap.State))}
	info, err := s.obs.Put(ctx, jetstream.ObjectMeta{Name: name, Description: "hub " + snap.Hub}, body)
	if err != nil {
		s.deleteObject(ctx, name)
		return 0, fmt.Errorf("natslog: store snapshot generation %d as %s: %w", gen, name, err)
	}
	if info.Size != size {
		s.deleteObject(ctx, name)
		return 0, fmt.Errorf("natslog: snapshot generation %d: stored %d bytes of %d", gen, info.Size, size)
	}
	// The Object Store computed the SHA-256 of what it stored ("SHA-256="
	// and the sum in URL-safe base64); Latest checks the object against it.
	sum, err := jetstream.DecodeObjectDigest(info.Digest)
	if err != nil || !strings.HasPrefix(info.Digest, "SHA-256=") || len(sum) != sha256.Size {
		s.deleteObject(ctx, name)
		return 0, fmt.Errorf("natslog: snapshot generation %d: object digest %q is not a SHA-256 (%v)", gen, info.Digest, err)
	}
	e := headEntry{gen: gen, size: size, name: name}
	copy(e.sum[:], sum)
	kept := append([]headEntry{e}, entries...)
	if len(kept) > s.opts.Keep {
		kept = kept[:s.opts.Keep]
	}
	v := encodeHead(kept)
	if rev == 0 {
		_, err = s.head.Create(ctx, headKey, v)
	} else {
		_, err = s.head.Update(ctx, headKey, v, rev)
	}
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		s.deleteObject(ctx, name)
		return 0, fmt.Errorf("%w: %s: another writer stored a snapshot after generation %d", ErrSnapshotConflict, s.opts.Bucket, cur)
	}
	if err != nil {
		// The object stays: the pointer may have moved to it.
		return 0, fmt.Errorf("natslog: move snapshot pointer to generation %d: %w", gen, err)
	}
	s.prune(ctx, kept)
	return gen, nil
}

// fullReader fills every buffer it is given unless the data ends, so the
// Object Store's chunks are all full size (a MultiReader returns the
// header alone in its first Read).
type fullReader struct{ r io.Reader }

func (f fullReader) Read(p []byte) (int, error) {
	n, err := io.ReadFull(f.r, p)
	if errors.Is(err, io.ErrUnexpectedEOF) {
		err = nil
	}
	return n, err
}

// prune deletes every object of a generation up to the latest kept one
// that the pointer no longer names: the generations beyond Keep and
// objects of writers that lost a race or died before moving the pointer.
// Newer objects may be another writer's snapshot in progress.
func (s *Snapshots) prune(ctx context.Context, kept []headEntry) {
	names, err := s.objectNames(ctx)
	if err != nil {
		s.stats.pruneErrors.Add(1)
		return
	}
	keep := make(map[string]bool, len(kept))
	for _, e := range kept {
		keep[e.name] = true
	}
	for _, name := range names {
		g, ok := objectGeneration(name)
		if !ok || keep[name] || g > kept[0].gen {
			continue
		}
		if !s.deleteObject(ctx, name) {
			s.stats.pruneErrors.Add(1)
		}
	}
}

// objectNames lists the names of the bucket's objects from the subjects of
// their metadata records, in one stream-info request. The Object Store's
// List watches those records with a consumer instead, and waits until ctx
// ends when another writer purges them between its first look and its
// consumer's start, which concurrent writers here do.
func (s *Snapshots) objectNames(ctx context.Context) ([]string, error) {
	st, err := s.js.Stream(ctx, "OBJ_"+s.opts.Bucket)
	if err != nil {
		return nil, err
	}
	prefix := "$O." + s.opts.Bucket + ".M."
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(prefix+">"))
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(info.State.Subjects))
	for subj := range info.State.Subjects {
		name, err := base64.URLEncoding.DecodeString(strings.TrimPrefix(subj, prefix))
		if err != nil {
			continue // not a record Snapshots wrote
		}
		names = append(names, string(name))
	}
	return names, nil
}

// deleteObject deletes an object's chunks and then its metadata record,
// which Object Store's Delete leaves behind as a marker: names are never
// reused here, so markers would only accumulate. The subjects are the
// Object Store's documented layout ($O.{bucket}.M.{base64url name}).
func (s *Snapshots) deleteObject(ctx context.Context, name string) bool {
	if err := s.obs.Delete(ctx, name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		return false
	}
	st, err := s.js.Stream(ctx, "OBJ_"+s.opts.Bucket)
	if err != nil {
		return false
	}
	meta := "$O." + s.opts.Bucket + ".M." + base64.URLEncoding.EncodeToString([]byte(name))
	return st.Purge(ctx, jetstream.WithPurgeSubject(meta)) == nil
}

// Latest returns the latest snapshot, or ErrNoSnapshot. If the latest
// generation's object is corrupt or missing, it returns the newest older
// kept generation that reads correctly together with a
// *SnapshotFallbackError (errors.Is ErrSnapshotFallback) saying which and
// why: the caller may restore it, replaying the log from its older
// positions, if the stream still holds them. If no kept generation reads,
// the error wraps ErrCorruptSnapshot or ErrSnapshotMissing for each.
// Errors reaching the servers return at once, without falling back.
//
// An object found missing while another writer moved the pointer (and
// pruned what it no longer keeps) is not a fault: Latest then reads the
// new pointer, up to three times.
func (s *Snapshots) Latest(ctx context.Context) (Snapshot, error) {
	for attempt := 1; ; attempt++ {
		entries, rev, err := s.readHead(ctx)
		if err != nil {
			return Snapshot{}, err
		}
		if len(entries) == 0 {
			return Snapshot{}, fmt.Errorf("%w in %s", ErrNoSnapshot, s.opts.Bucket)
		}
		if s.afterHead != nil {
			s.afterHead()
		}
		snap, skipped, err := s.latestOf(ctx, entries)
		if skipped == nil || !errors.Is(skipped, ErrSnapshotMissing) || attempt == 3 {
			s.count(skipped, errors.Is(err, ErrSnapshotFallback))
			return snap, err
		}
		if _, now, herr := s.readHead(ctx); herr != nil || now == rev {
			s.count(skipped, errors.Is(err, ErrSnapshotFallback))
			return snap, err
		}
	}
}

// count records the generations Latest skipped and whether it fell back.
func (s *Snapshots) count(skipped error, found bool) {
	if skipped == nil {
		return
	}
	if j, ok := skipped.(interface{ Unwrap() []error }); ok {
		s.stats.unreadable.Add(uint64(len(j.Unwrap())))
	}
	if found {
		s.stats.fallbacks.Add(1)
	}
}

// latestOf reads the newest readable generation of entries; skipped joins
// why newer ones could not be read (nil when the newest did).
func (s *Snapshots) latestOf(ctx context.Context, entries []headEntry) (snap Snapshot, skipped, err error) {
	var causes []error
	for i, e := range entries {
		snap, err := s.load(ctx, e)
		if err == nil {
			if i == 0 {
				return snap, nil, nil
			}
			skipped = errors.Join(causes...)
			return snap, skipped, &SnapshotFallbackError{Head: entries[0].gen, Used: e.gen, Cause: skipped}
		}
		if !errors.Is(err, ErrCorruptSnapshot) && !errors.Is(err, ErrSnapshotMissing) {
			return Snapshot{}, nil, err
		}
		causes = append(causes, err)
	}
	skipped = errors.Join(causes...)
	return Snapshot{}, skipped, fmt.Errorf("natslog: no kept snapshot generation is readable: %w", skipped)
}

// load reads and checks one generation's object.
func (s *Snapshots) load(ctx context.Context, e headEntry) (Snapshot, error) {
	if e.size > uint64(s.opts.MaxBytes) {
		return Snapshot{}, fmt.Errorf("%w: generation %d (%s) is %d bytes, MaxBytes %d", ErrSnapshotTooLarge, e.gen, e.name, e.size, s.opts.MaxBytes)
	}
	corrupt := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s generation %d object %s: %s", ErrCorruptSnapshot, s.opts.Bucket, e.gen, e.name, fmt.Sprintf(format, args...))
	}
	res, err := s.obs.Get(ctx, e.name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return Snapshot{}, fmt.Errorf("%w: %s generation %d object %s", ErrSnapshotMissing, s.opts.Bucket, e.gen, e.name)
	}
	if err != nil {
		return Snapshot{}, fmt.Errorf("natslog: read snapshot generation %d (%s): %w", e.gen, e.name, err)
	}
	defer res.Close()
	info, err := res.Info()
	if err != nil {
		return Snapshot{}, fmt.Errorf("natslog: read snapshot generation %d (%s): %w", e.gen, e.name, err)
	}
	if info.Size != e.size {
		return Snapshot{}, corrupt("%d bytes stored, %d written", info.Size, e.size)
	}
	buf := make([]byte, e.size)
	h := sha256.New()
	_, err = io.ReadFull(res, buf)
	if err == nil {
		// Read to the end: the Object Store checks its own digest there.
		var one [1]byte
		var n int
		n, err = res.Read(one[:])
		for err == nil && n == 0 {
			n, err = res.Read(one[:])
		}
		switch {
		case n > 0:
			return Snapshot{}, corrupt("more than the %d bytes its size says", e.size)
		case errors.Is(err, io.EOF):
			err = nil
		}
	}
	if errors.Is(err, jetstream.ErrDigestMismatch) || errors.Is(err, io.ErrUnexpectedEOF) {
		return Snapshot{}, corrupt("%v", err)
	}
	if err != nil {
		return Snapshot{}, fmt.Errorf("natslog: read snapshot generation %d (%s): %w", e.gen, e.name, err)
	}
	h.Write(buf)
	var sum [sha256.Size]byte
	if h.Sum(sum[:0]); sum != e.sum {
		return Snapshot{}, corrupt("SHA-256 %x, written %x", sum[:8], e.sum[:8])
	}
	snap, err := decodeSnapshot(buf)
	if err != nil {
		return Snapshot{}, corrupt("%v", err)
	}
	if snap.Generation != e.gen {
		return Snapshot{}, corrupt("holds generation %d", snap.Generation)
	}
	return snap, nil
}
