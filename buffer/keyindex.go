package buffer

import "sort"

// The key index remembers the block keys a read from Badger passed over, so
// that the committer can delete those blocks when they are acknowledged
// without iterating over them again. A Badger iterator copies the value of
// every block it lands on, even to hand out only its key: deleting a
// drained backlog by iteration copied each block a third time (after the
// read's two copies), about a tenth of an uplink's CPU while draining.
//
// The index of a stream lists, oldest first, every block whose last
// sequence number is from or more, as Badger held them when the reads
// passed over them. It stays exact because blocks leave a stream only from
// its front (acks, drop-oldest, expiry: entries below the head are trimmed
// after each commit) and are added only at its end (after the index's last
// entry, where a lookup that runs out falls back to an iterator). The one
// exception, dropBlock (a corrupt block anywhere), and a failed commit
// (Badger may hold part of it) empty the index and bump its generation, so
// a read that began before either publishes nothing.
//
// The index holds keys only (about 32 bytes a block), at most
// keyIndexBlocks of them per stream.

// keyIndexBlocks bounds the blocks one stream's key index lists.
const keyIndexBlocks = 4096

// keyIndex is a stream's index, guarded by Stream.mu. Entries are never
// changed once appended: the committer copies the slice under the lock and
// reads it after unlocking, while readers only append beyond its length or
// publish a new slice.
type keyIndex struct {
	gen    uint64
	from   uint64      // every block with lastSeq >= from is listed, up to the last entry
	blocks []blockInfo // ascending lastSeq, contiguous in Badger
}

// indexGen returns the generation a read must present when it publishes.
func (st *Stream) indexGen() uint64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.keys.gen
}

// publishKeys merges the blocks a read from seq found in Badger (in order,
// the first being the first block ending at seq or later) into the index,
// unless the index was emptied since the read began (gen).
func (st *Stream) publishKeys(gen, seq uint64, found []blockInfo) {
	if len(found) == 0 {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	k := &st.keys
	if k.gen != gen {
		return
	}
	head := st.m.head
	n := len(k.blocks)
	switch {
	case n > 0 && seq >= k.from && seq <= k.blocks[n-1].lastSeq+1:
		// Continues the index: keep what is new.
		last := k.blocks[n-1].lastSeq
		for _, b := range found {
			if b.lastSeq > last && len(k.blocks) < keyIndexBlocks {
				k.blocks = append(k.blocks, b)
			}
		}
	default:
		k.from, k.blocks = seq, nil
		for _, b := range found {
			if b.lastSeq >= head && len(k.blocks) < keyIndexBlocks {
				k.blocks = append(k.blocks, b)
			}
		}
	}
}

// trimKeys drops entries below the stream's new head; st.mu is held.
func (st *Stream) trimKeys(head uint64) {
	k := &st.keys
	i := 0
	for i < len(k.blocks) && k.blocks[i].lastSeq < head {
		i++
	}
	k.blocks = k.blocks[i:]
	if len(k.blocks) == 0 {
		k.blocks = nil
	}
}

// resetKeys empties the index and bumps its generation; st.mu is held.
func (st *Stream) resetKeys() {
	st.keys.gen++
	st.keys.blocks = nil
}

// indexedFrom returns the indexed blocks from the first one ending at seq
// or later, if the index covers seq. The slice must not be changed.
func (st *Stream) indexedFrom(seq uint64) ([]blockInfo, bool) {
	st.mu.Lock()
	k := st.keys
	st.mu.Unlock()
	if len(k.blocks) == 0 || seq < k.from {
		return nil, false
	}
	i := sort.Search(len(k.blocks), func(i int) bool { return k.blocks[i].lastSeq >= seq })
	if i == len(k.blocks) {
		return nil, false
	}
	return k.blocks[i:], true
}
