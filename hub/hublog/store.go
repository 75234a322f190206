package hublog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"

	"edgeflow/hub/ranges"
	"edgeflow/wire"
)

// store is the hub's Badger directory: the log, the applied ranges and the
// checkpoints.
type Store struct {
	DB   *badger.DB
	Dir  string
	sync bool
	log  *slog.Logger
	// ckpts are the retained usable checkpoints, newest first (see
	// checkpoint.go); the checkpoint writer's lock guards them.
	ckpts []*Checkpoint
}

// OpenStore opens (or creates) the Badger directory under dataDir with
// Badger's default sizes.
func OpenStore(dataDir string, sync bool, log *slog.Logger) (*Store, error) {
	return OpenStoreSized(dataDir, sync, log, Sizes{})
}

// Sizes are the Badger sizes the hub's memory budget chose (package
// membudget); a zero field keeps Badger's default.
type Sizes struct {
	MemTable, BlockCache, IndexCache, ValueLogFile int64
	MemTables                                      int
}

// OpenStoreSized is OpenStore with the memory-related sizes of z.
func OpenStoreSized(dataDir string, sync bool, log *slog.Logger, z Sizes) (*Store, error) {
	dir := filepath.Join(dataDir, "wal")
	opts := badger.DefaultOptions(dir).
		WithLogger(badgerLogger{log}).
		WithSyncWrites(false). // one explicit Sync per group instead
		WithDetectConflicts(false).
		WithValueThreshold(1 << 10). // batch payloads live in the value log
		WithNumVersionsToKeep(1).
		// Badger returns a value it cannot read as empty (and logs why);
		// with checksums checked, a damaged value is empty rather than
		// wrong, and the hub's own checks report it.
		WithVerifyValueChecksum(true).
		WithChecksumVerificationMode(options.OnBlockRead)
	if z.MemTable > 0 {
		opts = opts.WithMemTableSize(z.MemTable)
	}
	if z.MemTables > 0 {
		opts = opts.WithNumMemtables(z.MemTables)
	}
	if z.BlockCache > 0 {
		opts = opts.WithBlockCacheSize(z.BlockCache)
	}
	if z.IndexCache > 0 {
		opts = opts.WithIndexCacheSize(z.IndexCache)
	}
	if z.ValueLogFile > 0 {
		opts = opts.WithValueLogFileSize(z.ValueLogFile)
	}
	db, err := badger.Open(opts)
	if err != nil {
		return nil, classifyOpenError(dir, err)
	}
	return &Store{DB: db, Dir: dir, sync: sync, log: log}, nil
}

// close closes the store.
func (s *Store) Close() error { return s.DB.Close() }

// flush makes everything written so far durable.
func (s *Store) Flush() error {
	if !s.sync {
		return nil
	}
	return s.DB.Sync()
}

// StreamKey identifies a stream in the committer's dedup state.
type StreamKey struct {
	Device string
	ID     wire.StreamID
}

// DedupState is what the committer knows of a stream: the applied ranges
// (durable in the ranges key) and the highest sequence number it has heard
// of, including gaps.
type DedupState struct {
	Applied ranges.RangeSet
	Horizon uint64
	// lastSeenNs is the server time of the stream's last accepted batch:
	// the stream expires StreamIdleExpiry after it (streamcap.go).
	LastSeenNs int64
}

// encodeDedup is the value of a ranges key: the range set, the horizon,
// then the last-seen time (absent in values written before it was kept).
func EncodeDedup(d *DedupState) []byte {
	b := d.Applied.AppendBinary(make([]byte, 0, 24+20*d.Applied.Len()))
	b = binary.AppendUvarint(b, d.Horizon)
	return binary.AppendVarint(b, d.LastSeenNs)
}

// loadDedup reads every stream's applied ranges.
func (s *Store) LoadDedup() (map[StreamKey]*DedupState, error) {
	out := map[StreamKey]*DedupState{}
	err := s.DB.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{PrefixRanges}, PrefetchValues: true, PrefetchSize: 64})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			dev, id, err := parseRangesKey(it.Item().Key())
			if err != nil {
				return err
			}
			err = it.Item().Value(func(v []byte) error {
				rs, rest, err := ranges.DecodeRangeSet(v)
				if err != nil {
					return err
				}
				h, n := binary.Uvarint(rest)
				if n <= 0 {
					return errors.New("bad horizon")
				}
				st := &DedupState{Applied: rs, Horizon: max(h, rs.Max())}
				if rest = rest[n:]; len(rest) > 0 {
					if st.LastSeenNs, n = binary.Varint(rest); n <= 0 {
						return errors.New("bad last-seen time")
					}
				}
				out[StreamKey{dev, id}] = st
				return nil
			})
			if err != nil {
				return fmt.Errorf("%w: ranges of %s/%s: %v", ErrCorrupt, dev, id, err)
			}
		}
		return nil
	})
	return out, err
}

// lastWALSeq returns the position of the newest log entry (0: none).
func (s *Store) LastWALSeq() (uint64, error) {
	seq, _, err := s.lastWALEntry()
	return seq, err
}

// lastWALEntry returns the position and server time of the newest log
// entry (position 0: none).
func (s *Store) lastWALEntry() (seq uint64, serverTimeNs int64, err error) {
	err = s.DB.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{PrefixWAL}, Reverse: true})
		defer it.Close()
		it.Seek([]byte{PrefixWAL, 0xff})
		if !it.Valid() {
			return nil
		}
		var err error
		seq, serverTimeNs, err = ParseWALKey(it.Item().Key())
		return err
	})
	return seq, serverTimeNs, err
}

// walItemEntry reads and decodes the log entry at position seq from its
// Badger item.
func walItemEntry(item *badger.Item, seq uint64) (*Entry, error) {
	v, err := item.ValueCopy(nil)
	if err != nil {
		return nil, fmt.Errorf("read log entry %d: %w", seq, err)
	}
	return DecodeEntry(seq, v)
}

// WALItemEntry reads and decodes the log entry at position seq from its
// Badger item (an iterator's over PrefixWAL).
func WALItemEntry(item *badger.Item, seq uint64) (*Entry, error) { return walItemEntry(item, seq) }

// ReadEntry reads the log entry at position seq with server time
// serverTimeNs in txn; ok is false if it is gone (retention deletes an
// entry's event-time index keys with it; a crash between the two may
// leave keys behind). A position with BackfillFlag is read from the
// backfilled entries (backfill.go).
func ReadEntry(txn *badger.Txn, seq uint64, serverTimeNs int64) (e *Entry, ok bool, err error) {
	key := WALKey(seq, serverTimeNs)
	if IsBackfilled(seq) {
		key = BackfillKey(seq, serverTimeNs)
	}
	item, err := txn.Get(key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	e, err = walItemEntry(item, seq)
	return e, err == nil, err
}

// replay calls fn for each log entry after position from, in order.
func (s *Store) Replay(from uint64, fn func(*Entry) error) error {
	return s.DB.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{PrefixWAL}, PrefetchValues: true, PrefetchSize: 16})
		defer it.Close()
		for it.Seek(walSeekKey(from + 1)); it.Valid(); it.Next() {
			seq, _, err := ParseWALKey(it.Item().Key())
			if err != nil {
				return err
			}
			e, err := walItemEntry(it.Item(), seq)
			if err != nil {
				return err
			}
			if err := fn(e); err != nil {
				return err
			}
		}
		return nil
	})
}

// deleteKeys deletes keys in one write batch.
func DeleteKeys(db *badger.DB, keys [][]byte) error {
	wb := db.NewWriteBatch()
	for _, k := range keys {
		if err := wb.Delete(k); err != nil {
			wb.Cancel()
			return err
		}
	}
	return wb.Flush()
}

// badgerLogger sends Badger's logs to slog; its info chatter goes to
// debug. A value Badger cannot read it logs as an error with a dump of the
// key's versions (a line per version) and returns as empty; the hub
// detects that itself and reports the damage once with what it means, so
// those lines go to debug too.
type badgerLogger struct{ l *slog.Logger }

func (b badgerLogger) Errorf(f string, a ...any) {
	msg := "badger: " + trim(fmt.Sprintf(f, a...))
	if isReadFailureDump(f) {
		b.l.Debug(msg)
		return
	}
	b.l.Error(msg)
}
func (b badgerLogger) Warningf(f string, a ...any) { b.l.Warn("badger: " + trim(fmt.Sprintf(f, a...))) }
func (b badgerLogger) Infof(f string, a ...any)    { b.l.Debug("badger: " + trim(fmt.Sprintf(f, a...))) }
func (b badgerLogger) Debugf(f string, a ...any)   { b.l.Debug("badger: " + trim(fmt.Sprintf(f, a...))) }

// isReadFailureDump reports whether a Badger error format is one of those
// it logs for a value it cannot read (Item.Value, valueLog.Read).
func isReadFailureDump(format string) bool {
	for _, p := range []string{"Unable to read: Key:", "Key: %v, Version : %v", "Invalid read: vp"} {
		if strings.HasPrefix(format, p) {
			return true
		}
	}
	return false
}

func trim(s string) string {
	for len(s) > 0 && s[len(s)-1] == '\n' {
		s = s[:len(s)-1]
	}
	return s
}

// serverTimeSlack is how far the server times of log entries may run
// backwards against their positions: an entry is stamped when it arrives
// and logged in commit order, so times grow with positions only nearly.
const ServerTimeSlack = time.Minute

// firstWALAtOrAfter returns the smallest log position whose entry has a
// server time at or after ns, by binary search over positions (server
// times grow with positions up to the reordering eventsSlack covers). It
// returns the position after the last entry when there is none.
func (st *Store) FirstWALAtOrAfter(ns int64) (uint64, error) {
	var lo, hi uint64
	err := st.DB.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{PrefixWAL}})
		defer it.Close()
		at := func(seq uint64) (uint64, int64, bool, error) {
			it.Seek(walSeekKey(seq))
			if !it.Valid() {
				return 0, 0, false, nil
			}
			p, t, err := ParseWALKey(it.Item().Key())
			return p, t, true, err
		}
		first, _, ok, err := at(0)
		if err != nil || !ok {
			lo, hi = 1, 1
			return err
		}
		last, err := st.LastWALSeq()
		if err != nil {
			return err
		}
		lo, hi = first, last+1
		for lo < hi {
			mid := lo + (hi-lo)/2
			p, t, ok, err := at(mid)
			if err != nil {
				return err
			}
			if !ok || t >= ns {
				hi = mid
			} else {
				lo = p + 1
			}
		}
		return nil
	})
	return max(lo, 1), err
}
