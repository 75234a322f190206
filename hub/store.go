package hub

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"

	"edgeflow/hub/ranges"
	"edgeflow/wire"
)

// store is the hub's Badger directory: the log, the applied ranges and the
// checkpoints.
type store struct {
	db   *badger.DB
	dir  string
	sync bool
	log  *slog.Logger
	// ckpts are the retained usable checkpoints, newest first (see
	// checkpoint.go); the checkpoint writer's lock guards them.
	ckpts []*checkpoint
}

// openStore opens (or creates) the Badger directory under dataDir.
func openStore(dataDir string, sync bool, log *slog.Logger) (*store, error) {
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
	db, err := badger.Open(opts)
	if err != nil {
		return nil, classifyOpenError(dir, err)
	}
	return &store{db: db, dir: dir, sync: sync, log: log}, nil
}

// close closes the store.
func (s *store) close() error { return s.db.Close() }

// flush makes everything written so far durable.
func (s *store) flush() error {
	if !s.sync {
		return nil
	}
	return s.db.Sync()
}

// streamKey identifies a stream in the committer's dedup state.
type streamKey struct {
	device string
	id     wire.StreamID
}

// dedupState is what the committer knows of a stream: the applied ranges
// (durable in the ranges key) and the highest sequence number it has heard
// of, including gaps.
type dedupState struct {
	applied ranges.RangeSet
	horizon uint64
	// lastSeenNs is the server time of the stream's last accepted batch:
	// the stream expires StreamIdleExpiry after it (streamcap.go).
	lastSeenNs int64
}

// encodeDedup is the value of a ranges key: the range set, the horizon,
// then the last-seen time (absent in values written before it was kept).
func encodeDedup(d *dedupState) []byte {
	b := d.applied.AppendBinary(make([]byte, 0, 24+20*d.applied.Len()))
	b = binary.AppendUvarint(b, d.horizon)
	return binary.AppendVarint(b, d.lastSeenNs)
}

// loadDedup reads every stream's applied ranges.
func (s *store) loadDedup() (map[streamKey]*dedupState, error) {
	out := map[streamKey]*dedupState{}
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixRanges}, PrefetchValues: true, PrefetchSize: 64})
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
				st := &dedupState{applied: rs, horizon: max(h, rs.Max())}
				if rest = rest[n:]; len(rest) > 0 {
					if st.lastSeenNs, n = binary.Varint(rest); n <= 0 {
						return errors.New("bad last-seen time")
					}
				}
				out[streamKey{dev, id}] = st
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
func (s *store) lastWALSeq() (uint64, error) {
	seq, _, err := s.lastWALEntry()
	return seq, err
}

// lastWALEntry returns the position and server time of the newest log
// entry (position 0: none).
func (s *store) lastWALEntry() (seq uint64, serverTimeNs int64, err error) {
	err = s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixWAL}, Reverse: true})
		defer it.Close()
		it.Seek([]byte{prefixWAL, 0xff})
		if !it.Valid() {
			return nil
		}
		var err error
		seq, serverTimeNs, err = parseWALKey(it.Item().Key())
		return err
	})
	return seq, serverTimeNs, err
}

// walItemEntry reads and decodes the log entry at position seq from its
// Badger item.
func walItemEntry(item *badger.Item, seq uint64) (*walEntry, error) {
	v, err := item.ValueCopy(nil)
	if err != nil {
		return nil, fmt.Errorf("read log entry %d: %w", seq, err)
	}
	return decodeWALEntry(seq, v)
}

// replay calls fn for each log entry after position from, in order.
func (s *store) replay(from uint64, fn func(*walEntry) error) error {
	return s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixWAL}, PrefetchValues: true, PrefetchSize: 16})
		defer it.Close()
		for it.Seek(walSeekKey(from + 1)); it.Valid(); it.Next() {
			seq, _, err := parseWALKey(it.Item().Key())
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
func deleteKeys(db *badger.DB, keys [][]byte) error {
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
