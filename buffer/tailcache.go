package buffer

import (
	"sort"
	"sync/atomic"
)

// The tail cache keeps each stream's most recently written blocks in memory,
// exactly as they were written to Badger, so that a read starting in them
// (the uplink reads what was just appended) needs no Badger transaction,
// iterator and seek. Readers decode cached blocks with openBlock like
// Badger's, so both sources give the same records.
//
// Invariants, kept by the committer (the only writer) under Stream.mu:
//
//   - A stream's cached blocks are blocks whose write batch committed
//     (and, in DurabilitySync, synced), oldest first, contiguous (each starts
//     one past the previous one's last sequence number), and the newest is
//     the stream's newest block (its last sequence number is m.next-1). So
//     the cache is a suffix of the stream, readable or not.
//   - Blocks leave the cache when they leave the stream: Ack, drop-oldest
//     and expiry remove blocks only from the front, below the new head, and
//     the committer drops cached blocks below the head in the same critical
//     section that moves it; dropBlock can remove a block anywhere, so it
//     empties the stream's cache. (Reads raise their start to the head, so
//     a block below it is never served even while cached; dropping it
//     bounds memory.)
//   - A failed commit may have applied part of its batch, so Badger may no
//     longer match the in-memory positions; the cache is then turned off for
//     the store's lifetime and every read goes to Badger as before.
//   - The slice of cached blocks is never changed once published: the
//     committer installs a new one, so a reader uses the slice it copied
//     under Stream.mu without holding the lock while it calls back.
//
// One difference is inherent: a cached block damaged on disk while the
// store is open is read from the cache as it was written, where a read from
// Badger would fail its checksum and drop it as a gap. (Badger itself
// serves recent blocks from its memtable, so it mostly would not notice
// either.) After a reopen the cache is empty and reads see the damage.
//
// A read is served from the cache only if the cache holds the block with
// its first sequence number and every block after it up to the last
// readable one; it then sees exactly the blocks Badger would return. Any
// other read goes to Badger for the whole read.

const (
	// tailStreamBytes bounds the bytes one stream keeps cached: a few
	// seconds of a busy device, many minutes of a quiet one.
	tailStreamBytes = 64 << 10
	// tailStreamBlocks bounds the blocks one stream keeps cached, so the
	// per-commit copy of its slice stays small.
	tailStreamBlocks = 32
	// tailBlockOverhead is what one cached block costs beyond its value
	// (its entry and allocation rounding), counted against the budgets so
	// that many tiny blocks cannot exceed them.
	tailBlockOverhead = 64
	// maxTailCacheBytes bounds Options.TailCacheBytes.
	maxTailCacheBytes = 1 << 30
)

// tailBlock is one cached block: its sequence range, the rest of its key
// (append time and plain size) and its value as written.
type tailBlock struct {
	first, last uint64
	appendMs    int64
	plain       int
	v           []byte
}

// info is b's key as parseBlockKey gives it.
func (b tailBlock) info() blockInfo {
	return blockInfo{lastSeq: b.last, appendMs: b.appendMs, size: int64(b.plain)}
}

// cachedFrom returns st's committed blocks from the one holding seq on, if
// the cache holds that block and every later committed one (tailFind up to
// the committed end rather than the readable one). Only the committer may call it: it reads the
// cache without st.mu, which the committer alone changes. Blocks written by
// the commit in progress are in neither the cache nor Badger's view.
func (st *Stream) cachedFrom(seq uint64) ([]tailBlock, bool) {
	if !st.s.tail.enabled() {
		return nil, false
	}
	return tailFind(st.tail, seq, st.m.next)
}

// oldestCached returns the append time of the block holding head, looking
// in st's cache and then in added (the blocks the commit wrote for st), as
// oldestMs would find it in Badger. ok is false if neither holds it.
func (st *Stream) oldestCached(head uint64, added []tailBlock) (ms int64, ok bool) {
	blocks, ok := st.cachedFrom(head)
	if !ok {
		blocks = nil
	}
	for _, part := range [][]tailBlock{blocks, added} {
		for _, b := range part {
			if b.last >= head {
				return b.appendMs, b.first <= head
			}
		}
	}
	return 0, false
}

// cost is what b counts against the per-stream and store budgets.
func (b tailBlock) cost() int64 { return int64(len(b.v)) + tailBlockOverhead }

// tailCache is the store-wide state of the tail cache: its budget, the bytes
// in use and the read counters. Only the committer changes used.
type tailCache struct {
	budget       int64 // Options.TailCacheBytes; <= 0: off
	used         atomic.Int64
	off          atomic.Bool // set after a failed commit
	hits, misses atomic.Uint64
}

// enabled reports whether blocks may be cached and served.
func (c *tailCache) enabled() bool { return c.budget > 0 && !c.off.Load() }

// lookup returns the cached blocks a read from seq needs (see tailFind), or
// ok false if the read must go to Badger, and counts a hit or a miss.
func (c *tailCache) lookup(blocks []tailBlock, seq, next uint64) (_ []tailBlock, ok bool) {
	if c.enabled() {
		if blocks, ok = tailFind(blocks, seq, next); ok {
			c.hits.Add(1)
			return blocks, true
		}
	}
	c.misses.Add(1)
	return nil, false
}

// tailFind returns blocks from the one that holds seq on, if blocks (a
// stream's cache, copied with its readable position next) hold that block
// and every block after it through the one that holds next-1, contiguously:
// then they are exactly the blocks a Badger read from seq would visit.
func tailFind(blocks []tailBlock, seq, next uint64) (_ []tailBlock, ok bool) {
	i := sort.Search(len(blocks), func(i int) bool { return blocks[i].last >= seq })
	if i == len(blocks) || blocks[i].first > seq {
		return nil, false
	}
	for j := i; blocks[j].last+1 < next; j++ {
		if j+1 == len(blocks) || blocks[j+1].first != blocks[j].last+1 {
			return nil, false
		}
	}
	return blocks[i:], true
}

// disable turns the cache off for good (after a failed commit). Streams
// release their cached blocks at their next commit.
func (c *tailCache) disable() { c.off.Store(true) }

// updateTail brings st's cached blocks in line with a commit that succeeded;
// st.mu is held. head is the stream's new head; reset says that a block may
// have been removed other than from the front (dropBlock), so nothing cached
// is trusted; added are the blocks the commit wrote for st, in order, their
// values as written. The newest blocks are kept within the per-stream
// bounds and the store budget; older ones leave first, so what stays is
// still the end of the stream.
func (s *Store) updateTail(st *Stream, head uint64, reset bool, added []tailBlock) {
	if !s.tail.enabled() {
		reset, added = true, nil
	}
	old := st.tail
	if reset {
		old = nil
	}
	k := 0
	for k < len(old) && old[k].last < head {
		k++
	}
	old = old[k:]
	if len(added) == 0 && len(old) == len(st.tail) {
		return // nothing changed
	}
	// cand is the stream's blocks after the commit, newest last; a break in
	// the sequence (never expected) keeps only what follows it.
	cand := make([]tailBlock, 0, len(old)+len(added))
	for _, part := range [][]tailBlock{old, added} {
		for _, b := range part {
			if n := len(cand); n > 0 && cand[n-1].last+1 != b.first {
				clear(cand)
				cand = cand[:0]
			}
			if b.last >= head {
				cand = append(cand, b)
			}
		}
	}
	start, cost := s.tailStart(st, cand)
	var kept []tailBlock
	if start < len(cand) {
		kept = make([]tailBlock, len(cand)-start)
		copy(kept, cand[start:])
		newFrom := ^uint64(0)
		if len(added) > 0 {
			newFrom = added[0].first
		}
		for i := range kept {
			if kept[i].first >= newFrom {
				// An exact copy owned by the cache, not the encoder's
				// (possibly larger) buffer that Badger was given.
				kept[i].v = append([]byte(nil), kept[i].v...)
			}
		}
	}
	s.tail.used.Add(cost - st.tailBytes)
	st.tail, st.tailBytes = kept, cost
}

// tailStart picks how many of cand (st's blocks, newest last) to keep
// cached: the newest, as many as fit in the per-stream bounds and in the
// store budget left by the other streams. It returns the index of the first
// one kept and the bytes they cost.
func (s *Store) tailStart(st *Stream, cand []tailBlock) (start int, cost int64) {
	room := min(tailStreamBytes, s.tail.budget-(s.tail.used.Load()-st.tailBytes))
	start = len(cand)
	for start > 0 && len(cand)-start < tailStreamBlocks {
		c := cand[start-1].cost()
		if cost+c > room {
			break
		}
		cost += c
		start--
	}
	return start, cost
}

// TailCacheStats describes the store's tail cache; see Options.TailCacheBytes.
type TailCacheStats struct {
	// Hits counts reads (Scan, ReadFrom) answered from cached blocks and
	// Misses those that went to Badger, since the store was opened. A read
	// that finds nothing readable counts as neither.
	Hits, Misses uint64
	// Bytes is the memory the cached blocks take, as counted against Budget.
	Bytes int64
	// Budget is Options.TailCacheBytes (negative: off).
	Budget int64
	// Off is true when the cache is off: by Options, or after a failed
	// commit, which may leave Badger out of step with the cached blocks.
	Off bool
}

// TailCacheStats reports the tail cache's counters, so tests, benchmarks and
// operators can see how many reads it saves from Badger.
func (s *Store) TailCacheStats() TailCacheStats {
	return TailCacheStats{
		Hits:   s.tail.hits.Load(),
		Misses: s.tail.misses.Load(),
		Bytes:  s.tail.used.Load(),
		Budget: s.tail.budget,
		Off:    !s.tail.enabled(),
	}
}
