package buffer

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Durability says when an Append is safe from power loss; see the package
// documentation for what each mode can lose.
type Durability string

// Durability modes.
const (
	DurabilitySync     Durability = "sync"
	DurabilityInterval Durability = "interval"
	DurabilityNone     Durability = "none"
)

// FullPolicy says what Append does when a stream is at its bound.
type FullPolicy string

// Full policies.
const (
	// DropOldest frees the oldest blocks (a ring buffer on disk); the
	// dropped range becomes a Gap. The default, suited to telemetry.
	DropOldest FullPolicy = "drop_oldest"
	// Reject makes Append fail with ErrFull.
	Reject FullPolicy = "reject"
	// Block makes Append wait until an Ack frees space or its context ends.
	Block FullPolicy = "block"
)

// Profile picks Badger's memory settings.
type Profile string

// Profiles, chosen by measurement (see docs/BUFFER.md's RSS table).
const (
	// ProfileDefault suits a Raspberry Pi-class device (1 GiB RAM or more).
	ProfileDefault Profile = "default"
	// ProfileLowMemory suits small ARM boards (a few hundred MiB or less).
	ProfileLowMemory Profile = "low-memory"
)

// BlockCompression says how blocks are compressed on disk.
type BlockCompression string

// Block compressions. Every version reads blocks of either kind.
const (
	// CompressS2 compresses each block with s2 when that saves at least an
	// eighth. The default.
	CompressS2 BlockCompression = "s2"
	// CompressNone writes blocks as they are: the format an agent before
	// block compression can read.
	CompressNone BlockCompression = "none"
	// CompressColumns stores a block of events in the wire's columnar
	// form when every record is an event it carries exactly and that saves
	// an eighth (other blocks as with CompressS2): denser than s2 for
	// sensor readings, and an uplink sending the columnar codec ships such
	// a block without encoding its events again. The edge agent's default.
	CompressColumns BlockCompression = "columns"
)

// maxBlockBytes keeps the largest block (MaxBlockBytes plus one record of at
// most MaxBlockBytes) under both profiles' ValueThreshold.
const maxBlockBytes = 256 << 10

// Options configure a Store. Zero values take the defaults noted per field.
type Options struct {
	// Durability of appends. Default DurabilityInterval.
	Durability Durability
	// SyncInterval is the group-commit period of DurabilityInterval.
	// Default 100 ms.
	SyncInterval time.Duration
	// Profile of Badger memory settings. Default ProfileDefault.
	Profile Profile
	// ValueLogFileSize overrides the profile's value-log file size in bytes
	// (tests use it to exercise value-log GC). Default: from Profile.
	ValueLogFileSize int64
	// MaintenanceInterval is how often expired blocks are dropped, garbage
	// below the head removed and value-log GC run. Default 10 s.
	MaintenanceInterval time.Duration
	// PageOutInterval is how often, on Linux, the store checks the
	// process's file-backed resident memory and, once it has grown by more
	// than 1 MiB since the last pass, asks the kernel to page out Badger's
	// memory-mapped files (madvise MADV_PAGEOUT; Linux 5.4 or later, else
	// ignored). Badger maps every table and log it writes or reads, so
	// without this the whole store on disk ends up resident. Clean pages
	// leave the page cache too, so rereads of them come from disk. Default:
	// 100 ms in ProfileLowMemory, off in ProfileDefault; negative turns it off.
	PageOutInterval time.Duration
	// BlockCompression of newly written blocks. Default CompressS2. Stream
	// bounds (MaxBytes, Stats.Bytes) count blocks uncompressed, so a bound
	// holds the same events either way; compression only saves disk.
	BlockCompression BlockCompression
	// MaxBlockBytes bounds one block (records of one stream in one commit)
	// and one record. Default 256 KiB, at most 256 KiB: a block stays under
	// Badger's ValueThreshold, so it lives in the LSM tree where compaction
	// reclaims it, never in the value log, whose GC needs discard statistics
	// that a small queue may never produce (the space would not come back).
	MaxBlockBytes int
	// TailCacheBytes is the store-wide memory budget, in bytes, of the tail
	// cache: each stream keeps its most recently written blocks (at most 32
	// blocks or 64 KiB per stream) in memory, so a read that starts within
	// them, such as the uplink's right after an append, is answered without
	// a Badger transaction and seek. When the budget is full, a stream's
	// new blocks displace its own older cached ones, or are not cached;
	// reads return the same records either way, only slower. Default 8 MiB
	// in ProfileDefault, 256 KiB in ProfileLowMemory; negative turns the
	// cache off. See Store.TailCacheStats.
	TailCacheBytes int64
	// DiskReserve is the space, in bytes, the store keeps free on its
	// filesystem for Badger's own writes: memtable flushes, compactions,
	// a reopen after a crash. Badger writes through memory maps, and a
	// write the filesystem cannot back kills the process with SIGBUS, so
	// an append that would leave less than this free gets its stream's
	// full policy (Reject: ErrDiskFull; Block: waits; DropOldest: drops
	// its size of the oldest blocks, reported as gaps with reason
	// disk_full), and one that would leave less than three quarters of it
	// is refused whatever the policy. A stream's MaxBytes thus acts as
	// min(MaxBytes, what the filesystem can still give). Default:
	// DefaultDiskReserve(Profile); negative turns the guard off.
	DiskReserve int64
	// FreeSpace reports the bytes still free on the filesystem holding
	// the directory it is given. Default: statfs on Linux; elsewhere the
	// guard is off unless this is set.
	FreeSpace func(dir string) (int64, error)
	// Logger receives warnings and errors. Default slog.Default().
	Logger *slog.Logger
	// Now is the wall clock used for block ages. Default time.Now.
	Now func() time.Time
	// Registerer, if set, receives the store's Prometheus collector.
	Registerer prometheus.Registerer
}

// EnsureDefaults fills zero fields with their defaults.
func (o *Options) EnsureDefaults() {
	if o.Durability == "" {
		o.Durability = DurabilityInterval
	}
	if o.SyncInterval == 0 {
		o.SyncInterval = 100 * time.Millisecond
	}
	if o.Profile == "" {
		o.Profile = ProfileDefault
	}
	if o.PageOutInterval == 0 && o.Profile == ProfileLowMemory {
		o.PageOutInterval = 100 * time.Millisecond
	}
	if o.BlockCompression == "" {
		o.BlockCompression = CompressS2
	}
	if o.MaintenanceInterval == 0 {
		o.MaintenanceInterval = 10 * time.Second
	}
	if o.MaxBlockBytes == 0 {
		o.MaxBlockBytes = 256 << 10
	}
	if o.TailCacheBytes == 0 {
		o.TailCacheBytes = 8 << 20
		if o.Profile == ProfileLowMemory {
			o.TailCacheBytes = 256 << 10
		}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.DiskReserve == 0 {
		o.DiskReserve = DefaultDiskReserve(o.Profile)
	}
	if o.FreeSpace == nil {
		o.FreeSpace = statFreeSpace
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Validate names the first field that is out of range.
func (o *Options) Validate() error {
	switch o.Durability {
	case DurabilitySync, DurabilityInterval, DurabilityNone:
	default:
		return fmt.Errorf("buffer: durability %q: want sync, interval or none", o.Durability)
	}
	switch o.Profile {
	case ProfileDefault, ProfileLowMemory:
	default:
		return fmt.Errorf("buffer: profile %q: want default or low-memory", o.Profile)
	}
	switch o.BlockCompression {
	case CompressS2, CompressNone, CompressColumns:
	default:
		return fmt.Errorf("buffer: block compression %q: want s2, none or columns", o.BlockCompression)
	}
	if o.SyncInterval < time.Millisecond || o.SyncInterval > time.Minute {
		return fmt.Errorf("buffer: sync interval %v: want 1ms..1m", o.SyncInterval)
	}
	if o.MaintenanceInterval < 10*time.Millisecond {
		return fmt.Errorf("buffer: maintenance interval %v: want at least 10ms", o.MaintenanceInterval)
	}
	if o.PageOutInterval > 0 && o.PageOutInterval < time.Millisecond {
		return fmt.Errorf("buffer: page-out interval %v: want at least 1ms, or negative for off", o.PageOutInterval)
	}
	if o.MaxBlockBytes < 1<<10 || o.MaxBlockBytes > maxBlockBytes {
		return fmt.Errorf("buffer: max block bytes %d: want 1 KiB..256 KiB", o.MaxBlockBytes)
	}
	if o.ValueLogFileSize != 0 && (o.ValueLogFileSize < 1<<20 || o.ValueLogFileSize > 1<<30) {
		return fmt.Errorf("buffer: value log file size %d: want 1 MiB..1 GiB", o.ValueLogFileSize)
	}
	if o.DiskReserve > 1<<40 {
		return fmt.Errorf("buffer: disk reserve %d: want at most 1 TiB, or negative for off", o.DiskReserve)
	}
	if o.TailCacheBytes > maxTailCacheBytes {
		return fmt.Errorf("buffer: tail cache bytes %d: want at most 1 GiB, or negative for off", o.TailCacheBytes)
	}
	return nil
}

// StreamOptions bound one stream. Zero values take the defaults noted.
type StreamOptions struct {
	// MaxBytes bounds the stream's unacknowledged record bytes. Default 256 MiB.
	MaxBytes int64
	// MaxAge drops blocks older than this (by append time); 0 keeps them
	// until MaxBytes forces them out. At least 1s when set.
	MaxAge time.Duration
	// Full is the policy at MaxBytes. Default DropOldest.
	Full FullPolicy
}

// minStreamMaxAge bounds StreamOptions.MaxAge from below: a shorter age
// drops events before an uplink can send them.
const minStreamMaxAge = time.Second

// EnsureDefaults fills zero fields with their defaults.
func (o *StreamOptions) EnsureDefaults() {
	if o.MaxBytes == 0 {
		o.MaxBytes = 256 << 20
	}
	if o.Full == "" {
		o.Full = DropOldest
	}
}

// Validate names the first field that is out of range.
func (o *StreamOptions) Validate() error {
	if o.MaxBytes < 4<<10 {
		return fmt.Errorf("buffer: stream max bytes %d: want at least 4 KiB", o.MaxBytes)
	}
	if o.MaxAge < 0 {
		return fmt.Errorf("buffer: stream max age %v is negative", o.MaxAge)
	}
	if o.MaxAge > 0 && o.MaxAge < minStreamMaxAge {
		return fmt.Errorf("buffer: stream max age %v: want 0 (off) or at least %v", o.MaxAge, minStreamMaxAge)
	}
	switch o.Full {
	case DropOldest, Reject, Block:
	default:
		return fmt.Errorf("buffer: full policy %q: want drop_oldest, reject or block", o.Full)
	}
	return nil
}
