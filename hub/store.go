package hub

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"

	badger "github.com/dgraph-io/badger/v4"

	"edgeflow/wire"
)

// store is the hub's Badger directory: the log, the applied ranges and the
// checkpoints.
type store struct {
	db   *badger.DB
	dir  string
	sync bool
	log  *slog.Logger
	// deviceLogSince is the server time from which on the device log
	// index is complete (see devicelog.go); set by the hub at start.
	deviceLogSince int64
}

// openStore opens (or creates) the Badger directory under dataDir.
func openStore(dataDir string, sync bool, log *slog.Logger) (*store, error) {
	dir := filepath.Join(dataDir, "wal")
	opts := badger.DefaultOptions(dir).
		WithLogger(badgerLogger{log}).
		WithSyncWrites(false). // one explicit Sync per group instead
		WithDetectConflicts(false).
		WithValueThreshold(1 << 10). // batch payloads live in the value log
		WithNumVersionsToKeep(1)
	db, err := badger.Open(opts)
	if err != nil {
		return nil, fmt.Errorf("open hub store %s: %w (another hubd may hold it; move the directory away to start empty)", dir, err)
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
	applied RangeSet
	horizon uint64
}

// encodeDedup is the value of a ranges key: the range set, then the horizon.
func encodeDedup(d *dedupState) []byte {
	b := d.applied.AppendBinary(make([]byte, 0, 16+20*d.applied.Len()))
	return binary.AppendUvarint(b, d.horizon)
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
				rs, rest, err := decodeRangeSet(v)
				if err != nil {
					return err
				}
				h, n := binary.Uvarint(rest)
				if n <= 0 {
					return errors.New("bad horizon")
				}
				out[streamKey{dev, id}] = &dedupState{applied: rs, horizon: max(h, rs.Max())}
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

// checkpoint is the pointer record under keyCheckpoint: the log position
// the state covers and where its chunks are.
type checkpoint struct {
	Pos        uint64 `json:"pos"`
	Generation uint64 `json:"generation"`
	Chunks     int    `json:"chunks"`
	Bytes      int    `json:"bytes"`
	TimeNs     int64  `json:"time_ns"`
}

// chunkSize bounds one checkpoint chunk (one Badger value), well under
// Badger's transaction limit.
const chunkSize = 1 << 20

// chunkKey is k<generation:8><index:4>.
func chunkKey(gen uint64, i int) []byte {
	k := make([]byte, 13)
	k[0] = prefixCheckpoint
	binary.BigEndian.PutUint64(k[1:], gen)
	binary.BigEndian.PutUint32(k[9:], uint32(i))
	return k
}

// loadCheckpoint returns the last checkpoint and its state (nil, nil: none).
func (s *store) loadCheckpoint() (*checkpoint, []byte, error) {
	var ck *checkpoint
	var state []byte
	err := s.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get([]byte(keyCheckpoint))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		ck = new(checkpoint)
		if err := item.Value(func(v []byte) error { return json.Unmarshal(v, ck) }); err != nil {
			return fmt.Errorf("%w: checkpoint pointer: %v", ErrCorrupt, err)
		}
		state, err = readChunks(txn, ck)
		return err
	})
	return ck, state, err
}

// readChunks concatenates a checkpoint's chunks.
func readChunks(txn *badger.Txn, ck *checkpoint) ([]byte, error) {
	state := make([]byte, 0, ck.Bytes)
	for i := 0; i < ck.Chunks; i++ {
		item, err := txn.Get(chunkKey(ck.Generation, i))
		if err != nil {
			return nil, fmt.Errorf("%w: checkpoint %d chunk %d: %v", ErrCorrupt, ck.Generation, i, err)
		}
		if err := item.Value(func(v []byte) error { state = append(state, v...); return nil }); err != nil {
			return nil, fmt.Errorf("read checkpoint %d chunk %d: %w", ck.Generation, i, err)
		}
	}
	return state, nil
}

// writeCheckpoint stores state as the checkpoint at log position pos: the
// chunks of a new generation first, then (once they are durable) the
// pointer, then it deletes the previous generation.
func (s *store) writeCheckpoint(prev *checkpoint, pos uint64, state []byte, nowNs int64) (*checkpoint, error) {
	ck := &checkpoint{Pos: pos, Bytes: len(state), TimeNs: nowNs}
	if prev != nil {
		ck.Generation = prev.Generation + 1
	}
	wb := s.db.NewWriteBatch()
	for off := 0; off < len(state) || ck.Chunks == 0; off += chunkSize {
		end := min(off+chunkSize, len(state))
		if err := wb.Set(chunkKey(ck.Generation, ck.Chunks), state[off:end]); err != nil {
			wb.Cancel()
			return nil, err
		}
		ck.Chunks++
	}
	if err := wb.Flush(); err != nil {
		return nil, fmt.Errorf("write checkpoint chunks: %w", err)
	}
	ptr, _ := json.Marshal(ck)
	if err := s.db.Update(func(txn *badger.Txn) error { return txn.Set([]byte(keyCheckpoint), ptr) }); err != nil {
		return nil, fmt.Errorf("write checkpoint pointer: %w", err)
	}
	if err := s.db.Sync(); err != nil {
		return nil, fmt.Errorf("sync checkpoint: %w", err)
	}
	if prev != nil {
		s.deleteChunks(prev)
	}
	return ck, nil
}

// deleteChunks removes an old checkpoint generation; failures only leak space.
func (s *store) deleteChunks(ck *checkpoint) {
	wb := s.db.NewWriteBatch()
	for i := 0; i < ck.Chunks; i++ {
		if err := wb.Delete(chunkKey(ck.Generation, i)); err != nil {
			break
		}
	}
	if err := wb.Flush(); err != nil {
		s.log.Warn("delete old checkpoint", "generation", ck.Generation, "err", err)
	}
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

// badgerLogger sends Badger's logs to slog; its info chatter goes to debug.
type badgerLogger struct{ l *slog.Logger }

func (b badgerLogger) Errorf(f string, a ...any)   { b.l.Error("badger: " + trim(fmt.Sprintf(f, a...))) }
func (b badgerLogger) Warningf(f string, a ...any) { b.l.Warn("badger: " + trim(fmt.Sprintf(f, a...))) }
func (b badgerLogger) Infof(f string, a ...any)    { b.l.Debug("badger: " + trim(fmt.Sprintf(f, a...))) }
func (b badgerLogger) Debugf(f string, a ...any)   { b.l.Debug("badger: " + trim(fmt.Sprintf(f, a...))) }

func trim(s string) string {
	for len(s) > 0 && s[len(s)-1] == '\n' {
		s = s[:len(s)-1]
	}
	return s
}
