package buffer

import (
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"
)

// Deleting a block writes a tombstone; the block's bytes leave the disk
// only when a compaction brings the two together, which on a quiet store
// may take until the next restart. While the disk guard is limited, a
// maintenance pass hands every stream that is empty and has freed blocks
// since the last pass to reclaimEmpty, which drops the streams' whole block
// prefixes: Badger flushes its memtables without them and rewrites only the
// tables that hold them. The streams being empty, nothing live is lost and
// the rewrite copies little, so it fits in the reserve.

// reclaimCandidates lists the loaded streams that are empty and whose head
// moved since the last reclaim.
func (g *diskGuard) reclaimCandidates(streams []*Stream) []*Stream {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []*Stream
	for _, st := range streams {
		st.mu.Lock()
		head, empty := st.m.head, st.m.head == st.m.next && st.pending == 0
		st.mu.Unlock()
		if empty && head > max(g.lastHead[st], 1) {
			out = append(out, st)
		}
	}
	return out
}

// reclaimEmpty runs on the committer (the only writer of blocks, so no block
// can appear under a prefix while it is dropped): it drops the block
// prefixes of those of streams that are still empty.
func (s *Store) reclaimEmpty(streams []*Stream) error {
	var prefixes [][]byte
	var nums []uint32
	heads := map[*Stream]uint64{}
	for _, st := range streams {
		st.mu.Lock()
		head, empty := st.m.head, st.m.head == st.m.next
		st.mu.Unlock()
		if empty {
			prefixes = append(prefixes, streamBlockPrefix(st.num))
			nums = append(nums, st.num)
			heads[st] = head
		}
	}
	if len(prefixes) == 0 {
		return nil
	}
	err := s.db.Update(func(txn *badger.Txn) error {
		for _, n := range nums {
			if err := txn.Set(reclaimKey(n), nil); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		// Stream metadata and other writers' keys lie outside the prefixes;
		// Stream's creation and loading write under s.mu, so hold it for
		// the drop, during which Badger refuses writes.
		s.mu.Lock()
		err = s.db.DropPrefix(prefixes...)
		s.mu.Unlock()
	}
	if err != nil {
		_ = s.db.Update(func(txn *badger.Txn) error {
			for _, n := range nums {
				_ = txn.Delete(reclaimKey(n))
			}
			return nil
		})
		return fmt.Errorf("buffer %s: reclaim space of %d empty streams: %w", s.dir, len(prefixes), err)
	}
	s.disk.mu.Lock()
	for st, h := range heads {
		s.disk.lastHead[st] = h
	}
	s.disk.mu.Unlock()
	s.disk.reclaims.Add(1)
	return nil
}

// dropReclaimKey deletes a reclaim marker a crash left behind; loadStream
// calls it before the stream's blocks are scanned.
func (s *Store) dropReclaimKey(num uint32) error {
	return s.db.Update(func(txn *badger.Txn) error {
		_, err := txn.Get(reclaimKey(num))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		return txn.Delete(reclaimKey(num))
	})
}
