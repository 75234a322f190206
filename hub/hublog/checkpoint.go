package hublog

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"

	badger "github.com/dgraph-io/badger/v4"
)

// Checkpoints. The store keeps the last two: the pointer under
// keyCheckpoint is the newest, the one under keyPrevCheckpoint the one
// before it, and each points at its own generation of chunks
// (k<generation:8><index:4>). A pointer holds a CRC-32C of itself and of
// the state its chunks make, so damage (a flipped byte, a value Badger can
// no longer read, which it returns as empty) is detected, never parsed
// into a wrong state. Retention keeps the log entries after the older of
// the two, so recovery can fall back to it, and replay the log from there.

// castagnoli is the CRC-32C table of checkpoint checksums.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// pointerMagic starts a checksummed pointer: magic, version, CRC-32C of
// the JSON body that follows. A pointer that starts with '{' is the
// unchecked JSON that stores written before checksums hold.
var pointerMagic = []byte{'C', 'K', 2}

// checkpoint is a pointer record: the log position the state covers and
// where its chunks are.
type Checkpoint struct {
	Pos        uint64 `json:"pos"`
	Generation uint64 `json:"generation"`
	Chunks     int    `json:"chunks"`
	Bytes      int    `json:"bytes"`
	TimeNs     int64  `json:"time_ns"`
	// StateCRC is the CRC-32C of the state; nil in pointers written
	// before checksums (their state is only checked by parsing it).
	StateCRC *uint32 `json:"state_crc,omitempty"`
}

// encodePointer is a pointer's stored value.
func EncodePointer(ck *Checkpoint) []byte {
	body, _ := json.Marshal(ck)
	out := append([]byte(nil), pointerMagic...)
	out = binary.BigEndian.AppendUint32(out, crc32.Checksum(body, castagnoli))
	return append(out, body...)
}

// decodePointer reads a stored pointer, checking its checksum.
func DecodePointer(v []byte) (*Checkpoint, error) {
	ck := new(Checkpoint)
	switch {
	case len(v) > 0 && v[0] == '{':
		if err := json.Unmarshal(v, ck); err != nil {
			return nil, fmt.Errorf("%w: pointer: %v", ErrCheckpointDamaged, err)
		}
		return ck, nil
	case len(v) < len(pointerMagic)+4 || !bytes.Equal(v[:len(pointerMagic)], pointerMagic):
		return nil, fmt.Errorf("%w: pointer of %d bytes is not a checkpoint pointer", ErrCheckpointDamaged, len(v))
	}
	body := v[len(pointerMagic)+4:]
	if crc32.Checksum(body, castagnoli) != binary.BigEndian.Uint32(v[len(pointerMagic):]) {
		return nil, fmt.Errorf("%w: pointer checksum mismatch", ErrCheckpointDamaged)
	}
	if err := json.Unmarshal(body, ck); err != nil {
		return nil, fmt.Errorf("%w: pointer: %v", ErrCheckpointDamaged, err)
	}
	return ck, nil
}

// chunkSize bounds one checkpoint chunk (one Badger value), well under
// Badger's transaction limit.
const chunkSize = 1 << 20

// StoredCheckpoint is one stored checkpoint as loaded: its pointer key,
// the pointer and state, or why it cannot be used (wrapping
// ErrCheckpointDamaged).
type StoredCheckpoint struct {
	Key        string
	Checkpoint *Checkpoint
	State      []byte
	Err        error
}

// loadCheckpoints reads the stored checkpoints, newest first. A damaged
// one is returned with its err set; only a failure to read the store at
// all is an error.
func (s *Store) LoadCheckpoints() ([]StoredCheckpoint, error) {
	var out []StoredCheckpoint
	err := s.DB.View(func(txn *badger.Txn) error {
		for _, key := range []string{KeyCheckpoint, KeyPrevCheckpoint} {
			item, err := txn.Get([]byte(key))
			if errors.Is(err, badger.ErrKeyNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			sc := StoredCheckpoint{Key: key}
			v, err := item.ValueCopy(nil)
			if err != nil {
				return err
			}
			if sc.Checkpoint, sc.Err = DecodePointer(v); sc.Err == nil {
				sc.State, sc.Err = readChunks(txn, sc.Checkpoint)
			}
			out = append(out, sc)
		}
		return nil
	})
	return out, err
}

// loadCheckpoint returns the newest usable checkpoint and its state (nil,
// nil: none usable), for callers that need no fallback details.
func (s *Store) LoadCheckpoint() (*Checkpoint, []byte, error) {
	all, err := s.LoadCheckpoints()
	if err != nil {
		return nil, nil, err
	}
	for _, sc := range all {
		if sc.Err == nil {
			return sc.Checkpoint, sc.State, nil
		}
	}
	return nil, nil, nil
}

// readChunks concatenates a checkpoint's chunks and checks them against
// the pointer.
func readChunks(txn *badger.Txn, ck *Checkpoint) ([]byte, error) {
	if ck.Chunks < 1 || ck.Bytes < 0 || ck.Bytes > ck.Chunks*chunkSize {
		return nil, fmt.Errorf("%w: generation %d: pointer says %d chunks of %d bytes", ErrCheckpointDamaged, ck.Generation, ck.Chunks, ck.Bytes)
	}
	state := make([]byte, 0, ck.Bytes)
	for i := 0; i < ck.Chunks; i++ {
		item, err := txn.Get(chunkKey(ck.Generation, i))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil, fmt.Errorf("%w: generation %d: chunk %d missing", ErrCheckpointDamaged, ck.Generation, i)
		}
		if err != nil {
			return nil, fmt.Errorf("read checkpoint %d chunk %d: %w", ck.Generation, i, err)
		}
		if err := item.Value(func(v []byte) error { state = append(state, v...); return nil }); err != nil {
			return nil, fmt.Errorf("read checkpoint %d chunk %d: %w", ck.Generation, i, err)
		}
	}
	if len(state) != ck.Bytes {
		return nil, fmt.Errorf("%w: generation %d: read %d bytes, pointer says %d (a chunk is unreadable)", ErrCheckpointDamaged, ck.Generation, len(state), ck.Bytes)
	}
	if ck.StateCRC != nil && crc32.Checksum(state, castagnoli) != *ck.StateCRC {
		return nil, fmt.Errorf("%w: generation %d: state checksum mismatch", ErrCheckpointDamaged, ck.Generation)
	}
	return state, nil
}

// retainedCheckpoints sets the checkpoints the store keeps (newest first,
// at most two, usable ones only): the next write keeps the first as the
// previous checkpoint.
func (s *Store) RetainedCheckpoints(cks ...*Checkpoint) {
	s.ckpts = s.ckpts[:0]
	for _, ck := range cks {
		if ck != nil && len(s.ckpts) < 2 {
			s.ckpts = append(s.ckpts, ck)
		}
	}
}

// oldestRetainedPos is the log position of the older retained checkpoint:
// retention must keep the log after it so recovery can fall back to it.
func (s *Store) OldestRetainedPos() uint64 {
	if len(s.ckpts) == 0 {
		return 0
	}
	return s.ckpts[len(s.ckpts)-1].Pos
}

// writeCheckpoint stores state as the checkpoint at log position pos: the
// chunks of a new generation first, then (once they are durable) the
// pointers, the newest retained checkpoint becoming the previous one; then
// it deletes the chunks of every other generation.
func (s *Store) WriteCheckpoint(pos uint64, state []byte, nowNs int64) (*Checkpoint, error) {
	gen, err := s.nextCheckpointGeneration()
	if err != nil {
		return nil, err
	}
	crc := crc32.Checksum(state, castagnoli)
	ck := &Checkpoint{Pos: pos, Generation: gen, Bytes: len(state), TimeNs: nowNs, StateCRC: &crc}
	wb := s.DB.NewWriteBatch()
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
	var prev *Checkpoint
	if len(s.ckpts) > 0 {
		prev = s.ckpts[0]
	}
	err = s.DB.Update(func(txn *badger.Txn) error {
		if prev != nil {
			if err := txn.Set([]byte(KeyPrevCheckpoint), EncodePointer(prev)); err != nil {
				return err
			}
		} else if err := txn.Delete([]byte(KeyPrevCheckpoint)); err != nil {
			return err
		}
		return txn.Set([]byte(KeyCheckpoint), EncodePointer(ck))
	})
	if err != nil {
		return nil, fmt.Errorf("write checkpoint pointer: %w", err)
	}
	if err := s.DB.Sync(); err != nil {
		return nil, fmt.Errorf("sync checkpoint: %w", err)
	}
	s.RetainedCheckpoints(ck, prev)
	s.deleteUnretainedChunks()
	return ck, nil
}

// nextCheckpointGeneration is one more than any generation in use, so a
// new checkpoint never mixes its chunks with a damaged one's.
func (s *Store) nextCheckpointGeneration() (uint64, error) {
	var gen uint64
	found := false
	for _, ck := range s.ckpts {
		gen, found = max(gen, ck.Generation), true
	}
	err := s.DB.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixCheckpoint}, Reverse: true})
		defer it.Close()
		it.Seek([]byte{prefixCheckpoint, 0xff})
		if it.Valid() && len(it.Item().Key()) == 13 {
			gen, found = max(gen, binary.BigEndian.Uint64(it.Item().Key()[1:])), true
		}
		return nil
	})
	if !found {
		return 0, err
	}
	return gen + 1, err
}

// deleteUnretainedChunks removes the chunks of generations no retained
// checkpoint uses; failures only leak space until the next checkpoint.
func (s *Store) deleteUnretainedChunks() {
	keep := map[uint64]bool{}
	for _, ck := range s.ckpts {
		keep[ck.Generation] = true
	}
	var keys [][]byte
	err := s.DB.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixCheckpoint}})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			k := it.Item().Key()
			if len(k) != 13 || !keep[binary.BigEndian.Uint64(k[1:])] {
				keys = append(keys, it.Item().KeyCopy(nil))
			}
		}
		return nil
	})
	if err == nil && len(keys) > 0 {
		err = DeleteKeys(s.DB, keys)
	}
	if err != nil {
		s.log.Warn("delete old checkpoint chunks", "err", err)
	}
}
