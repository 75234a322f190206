package buffer

import (
	"fmt"
	"time"

	"github.com/dgraph-io/badger/v4"
)

type opKind uint8

const (
	opAppend    opKind = iota // write recs as new blocks
	opAck                     // acknowledge through upTo
	opDropBlock               // drop the block ending at upTo with reason (corrupt data)
	opExpire                  // drop blocks appended before cutoffMs
	opReclaim                 // compact the blocks of empty streams away (reclaim.go)
)

// op is one request to the committer, the only writer of stream data.
type op struct {
	kind     opKind
	st       *Stream
	recs     [][]byte
	size     int64
	wait     bool
	upTo     uint64
	reason   string
	cutoffMs int64
	// diskDrop makes an append drop at least its size of the stream's
	// oldest blocks: the disk guard's DropOldest below the reserve.
	diskDrop bool
	streams  []*Stream // opReclaim's candidates

	res  Range
	err  error
	done chan struct{}
}

// submit queues o for the committer and waits until it is done.
func (s *Store) submit(o *op) error {
	if err := s.enter(); err != nil {
		return err
	}
	o.done = make(chan struct{})
	s.ops <- o
	s.closeMu.RUnlock()
	<-o.done
	return o.err
}

// maxGroup bounds how many queued ops one commit takes. It is large
// because each commit's hand-offs to Badger's writer and back wait in the Go
// run queue: in a busy process with thousands of streams (fleetsim's 10,000
// agents on one store) that wait, not the write, sets the commit rate, so
// the commit must take all that queued behind it. At 256 the committer fell
// behind at 10,000 devices and held every device's appends.
const maxGroup = 4096

// commitLoop is the single writer: it takes every queued op, writes them in
// one Badger write batch, syncs per the durability mode and answers them.
func (s *Store) commitLoop() {
	defer s.wg.Done()
	var tick <-chan time.Time
	if s.opts.Durability == DurabilityInterval {
		t := time.NewTicker(s.opts.SyncInterval)
		defer t.Stop()
		tick = t.C
	}
	var awaiting []*op               // interval-mode appends waiting for the next sync
	unsynced := map[*Stream]uint64{} // interval mode: next positions written, not yet synced
	dirty := false
	group := make([]*op, 0, maxGroup)
	syncNow := func() {
		err := s.sync()
		if err != nil {
			s.opts.Logger.Error("buffer: sync failed", "dir", s.dir, "err", err)
		} else {
			for st, next := range unsynced {
				st.publish(next)
			}
			clear(unsynced)
		}
		for _, o := range awaiting {
			if err != nil {
				o.err = fmt.Errorf("buffer %s: sync: %w", s.dir, err)
			}
			close(o.done)
		}
		awaiting, dirty = awaiting[:0], false
	}
	for {
		select {
		case o := <-s.ops:
			group = append(group[:0], o)
		drain:
			for len(group) < maxGroup {
				select {
				case o := <-s.ops:
					group = append(group, o)
				default:
					break drain
				}
			}
			s.commit(group, unsynced)
			dirty = true
			for _, o := range group {
				if o.kind == opReclaim {
					o.err = s.reclaimEmpty(o.streams)
				}
			}
			for _, o := range group {
				if o.wait && o.err == nil && s.opts.Durability == DurabilityInterval {
					awaiting = append(awaiting, o)
				} else {
					close(o.done)
				}
			}
		case <-tick:
			if dirty {
				syncNow()
			}
		case <-s.stop:
			// Close holds closeMu, so nothing new is queued; finish what is.
			for {
				select {
				case o := <-s.ops:
					s.commit([]*op{o}, unsynced)
					if o.kind == opReclaim {
						o.err = ErrClosed
					}
					close(o.done)
					continue
				default:
				}
				break
			}
			syncNow()
			return
		}
	}
}

// change is what one commit does to one stream: its metadata as the
// group's ops leave it, staged in the write batch and published to the
// stream once the batch is durable.
type change struct {
	st           *Stream
	m            meta
	head0, next0 uint64 // positions before this commit
	bytes        int64
	acked, drops uint64
	added        []tailBlock // blocks written, for the tail cache
	reset        bool        // a block may have left from the middle
	// front is the first block an ack or drop in this commit found
	// at or after the head it left (its front.head): the stream's
	// oldest append time, if no later op moved the head again and no
	// block left from the middle (the pass may have seen that one).
	front frontBlock
}

// commit writes a group of ops as one Badger write batch. Metadata changes
// are set before the deletes they justify, so a crash in between leaves
// only garbage below a stream's head, never a silent hole.
// In DurabilityInterval the new positions go to unsynced and become
// readable at the next sync; in the other modes they are readable at once.
func (s *Store) commit(group []*op, unsynced map[*Stream]uint64) {
	wb := s.db.NewWriteBatch()
	defer wb.Cancel()
	nowMs := s.opts.Now().UnixMilli()
	changes, err := s.stage(wb, group, nowMs)
	if err == nil {
		err = wb.Flush()
	}
	if err == nil && s.opts.Durability == DurabilitySync {
		err = s.sync()
	}
	if err != nil {
		s.commitFailed(group, changes, fmt.Errorf("buffer %s: commit: %w", s.dir, err))
		return
	}
	for _, c := range changes {
		s.publish(c, group, unsynced, nowMs)
	}
}

// stage applies the group's ops, in order, to the write batch and to one
// change per stream they touch; it stops at the first error.
func (s *Store) stage(wb *badger.WriteBatch, group []*op, nowMs int64) (map[*Stream]*change, error) {
	changes := map[*Stream]*change{}
	for _, o := range group {
		if o.kind == opReclaim {
			continue // after the group, on the committer
		}
		c, ok := changes[o.st]
		if !ok {
			o.st.mu.Lock()
			c = &change{st: o.st, m: o.st.m, head0: o.st.m.head, next0: o.st.m.next, bytes: o.st.bytes}
			c.m.gaps = append([]Gap(nil), o.st.m.gaps...)
			o.st.mu.Unlock()
			changes[o.st] = c
		}
		if err := s.stageOp(wb, o, c, nowMs); err != nil {
			return changes, err
		}
	}
	return changes, nil
}

// stageOp applies one append, ack, block drop or expiry to wb and c.
func (s *Store) stageOp(wb *badger.WriteBatch, o *op, c *change, nowMs int64) error {
	var n uint64
	var err error
	switch o.kind {
	case opAppend:
		need, reason := c.bytes+o.size-o.st.opts.MaxBytes, ReasonMaxBytes
		if o.diskDrop && o.size > need {
			need, reason = o.size, ReasonDiskFull
		}
		if o.st.opts.Full == DropOldest && need > 0 {
			n, err = s.dropOldest(wb, o.st, &c.m, &c.bytes, need, reason, &c.front)
			c.drops += n
		}
		if err == nil {
			o.res, err = s.writeBlocks(wb, o.st, &c.m, &c.bytes, o.recs, nowMs, &c.added)
		}
	case opAck:
		n, err = s.ackThrough(wb, o.st, &c.m, &c.bytes, o.upTo, &c.front)
		c.acked += n
	case opDropBlock:
		// A block leaves from the middle: the key index no longer
		// lists the stream's blocks, for this group's later ops too.
		o.st.mu.Lock()
		o.st.resetKeys()
		o.st.mu.Unlock()
		n, err = s.dropBlock(wb, o.st, &c.m, &c.bytes, o.upTo, o.reason)
		c.drops += n
		c.reset = true
	case opExpire:
		n, err = s.dropWhile(wb, o.st, &c.m, &c.bytes, ReasonMaxAge, func(b blockInfo) bool { return b.appendMs < o.cutoffMs }, &c.front)
		c.drops += n
	}
	return err
}

// commitFailed gives every op of the group err. Part of the batch may have
// been applied: Badger and the cached blocks could disagree from here on,
// so reads go to Badger.
func (s *Store) commitFailed(group []*op, changes map[*Stream]*change, err error) {
	s.opts.Logger.Error("buffer: commit failed", "err", err)
	s.tail.disable()
	for _, c := range changes {
		c.st.mu.Lock()
		s.updateTail(c.st, c.m.head, true, nil)
		c.st.resetKeys()
		c.st.mu.Unlock()
	}
	for _, o := range group {
		o.err = err
		if o.kind == opAppend {
			o.st.mu.Lock()
			o.st.pending -= o.size
			o.st.mu.Unlock()
		}
	}
}

// oldest is the stream's oldest append time once c is committed: -1 when
// it is unchanged, 0 when the stream is empty.
func (c *change) oldest(nowMs int64) int64 {
	switch {
	case c.m.next == c.m.head:
		return 0
	case c.m.head != c.head0:
		if c.front.found && c.front.head == c.m.head && !c.reset {
			// Seen by the delete's own pass: no second Badger seek,
			// which would copy the two blocks it lands on.
			return c.front.appendMs
		}
		if oldest, ok := c.st.oldestCached(c.m.head, c.added); ok {
			return oldest
		}
		return c.st.oldestMs(c.m.head)
	case c.next0 == c.head0:
		return nowMs // first blocks of an empty stream
	}
	return -1
}

// publish makes a committed change the stream's state: its metadata, tail
// cache, key index, readable position and counters.
func (s *Store) publish(c *change, group []*op, unsynced map[*Stream]uint64, nowMs int64) {
	st := c.st
	oldest := c.oldest(nowMs)
	st.mu.Lock()
	freed := c.bytes < st.bytes
	st.m, st.bytes = c.m, c.bytes
	st.fill.observe(nowMs, st.bytes)
	// With the new head, in the same critical section, so no reader
	// sees blocks that are gone or misses blocks that are written.
	s.updateTail(st, c.m.head, c.reset, c.added)
	if c.reset {
		// Again now that the drop is in Badger: a read that took its
		// generation after the reset at the op but its snapshot before
		// this commit may have seen the dropped block.
		st.resetKeys()
	} else {
		st.trimKeys(c.m.head)
	}
	if s.opts.Durability == DurabilityInterval {
		unsynced[st] = c.m.next
	} else if c.m.next > st.readable {
		st.readable = c.m.next
		st.signalMore()
	}
	if oldest >= 0 {
		st.oldest = oldest
	}
	for _, o := range group {
		if o.st == st && o.kind == opAppend {
			st.pending -= o.size
			st.appended.Add(o.res.Len())
		}
	}
	if freed {
		st.freed()
	}
	st.mu.Unlock()
	st.acked.Add(c.acked)
	st.dropped.Add(c.drops)
}

// writeBlocks assigns sequence numbers to recs and writes them as blocks of
// at most MaxBlockBytes. It appends each block to added, for the tail cache
// to take once the batch has committed.
func (s *Store) writeBlocks(wb *badger.WriteBatch, st *Stream, m *meta, bytes *int64, recs [][]byte, nowMs int64, added *[]tailBlock) (Range, error) {
	r := Range{First: m.next, Last: m.next + uint64(len(recs)) - 1}
	start, size := 0, 0
	flush := func(end int) error {
		first := m.next
		v, plain := encodeBlock(first, recs[start:end], size, s.opts.BlockCompression, &s.scratch)
		last := first + uint64(end-start) - 1
		if err := wb.Set(blockKey(st.num, last, nowMs, plain), v); err != nil {
			return err
		}
		if s.tail.enabled() {
			*added = append(*added, tailBlock{first: first, last: last, appendMs: nowMs, plain: plain, v: v})
		}
		m.next = last + 1
		*bytes += int64(plain)
		start, size = end, 0
		return nil
	}
	for i, rec := range recs {
		if i > start && size+len(rec) > s.opts.MaxBlockBytes {
			if err := flush(i); err != nil {
				return Range{}, err
			}
		}
		size += len(rec) + 4
	}
	if err := flush(len(recs)); err != nil {
		return Range{}, err
	}
	return r, nil
}

// frontBlock is what a pass deleting blocks from the front of a stream
// learnt about the first block it kept: its append time, which is the
// stream's oldest once head (the head the pass left) holds.
type frontBlock struct {
	head     uint64
	appendMs int64
	found    bool
}

// ackThrough moves the acknowledged position to upTo and deletes the blocks
// it covers entirely. It returns how many records became acknowledged and
// notes in front the first block it kept, if its pass saw one.
func (s *Store) ackThrough(wb *badger.WriteBatch, st *Stream, m *meta, bytes *int64, upTo uint64, front *frontBlock) (uint64, error) {
	if upTo <= m.acked {
		return 0, nil
	}
	if upTo >= m.next {
		return 0, fmt.Errorf("ack of %d beyond last appended %d in stream %q", upTo, m.next-1, st.name)
	}
	n := uint64(0)
	if upTo >= m.head {
		n = upTo - m.head + 1
	}
	oldHead := m.head
	m.acked = upTo
	m.head = max(m.head, upTo+1)
	m.trimGaps(upTo)
	if err := wb.Set(metaKey(st.num), m.encode()); err != nil {
		return 0, err
	}
	// The first block kept is the first from the old head ending past upTo:
	// the block that holds the new head.
	kept, found, err := s.deleteBlocks(wb, st, oldHead, bytes, func(b blockInfo) bool { return b.lastSeq <= upTo })
	*front = frontBlock{head: m.head, appendMs: kept.appendMs, found: found}
	return n, err
}

// dropOldest frees at least need bytes from the front of the stream,
// recording the range as a gap with reason.
func (s *Store) dropOldest(wb *badger.WriteBatch, st *Stream, m *meta, bytes *int64, need int64, reason string, front *frontBlock) (uint64, error) {
	freed := int64(0)
	return s.dropWhile(wb, st, m, bytes, reason, func(b blockInfo) bool {
		if freed >= need {
			return false
		}
		freed += b.size
		return true
	}, front)
}

// dropWhile drops whole blocks from the front while keep returns true and
// records the dropped range as a gap. It returns how many records it dropped
// and notes in front the first block it kept, if it dropped any.
func (s *Store) dropWhile(wb *badger.WriteBatch, st *Stream, m *meta, bytes *int64, reason string, drop func(blockInfo) bool, front *frontBlock) (uint64, error) {
	var victims []blockInfo
	var kept blockInfo
	found := false
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: streamBlockPrefix(st.num)})
		defer it.Close()
		for it.Seek(blockSeekKey(st.num, m.head)); it.Valid(); it.Next() {
			b, ok := parseBlockKey(it.Item().Key())
			if !ok || b.lastSeq >= m.next || !drop(b) {
				kept, found = b, ok && b.lastSeq < m.next
				break
			}
			victims = append(victims, b)
		}
		return nil
	})
	if err != nil || len(victims) == 0 {
		return 0, err
	}
	*front = frontBlock{head: victims[len(victims)-1].lastSeq + 1, appendMs: kept.appendMs, found: found}
	last := victims[len(victims)-1].lastSeq
	g := Gap{First: m.head, Last: last, Reason: reason}
	n := m.addGap(g)
	m.head = last + 1
	if err := wb.Set(metaKey(st.num), m.encode()); err != nil {
		return 0, err
	}
	for _, b := range victims {
		if err := wb.Delete(blockKey(st.num, b.lastSeq, b.appendMs, int(b.size))); err != nil {
			return 0, err
		}
		*bytes -= b.size
	}
	s.opts.Logger.Warn("buffer: dropped events", "stream", st.name, "first", g.First, "last", g.Last, "reason", reason)
	return n, nil
}

// dropBlock drops one block wherever it is (a corrupt one found by a read)
// and reports its range as a gap. Its first sequence number comes from the
// block before it, since a corrupt block's own header cannot be trusted. The
// head moves only if the block is at it.
func (s *Store) dropBlock(wb *badger.WriteBatch, st *Stream, m *meta, bytes *int64, last uint64, reason string) (uint64, error) {
	var victim []byte
	var size int64
	first := m.head
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: streamBlockPrefix(st.num)})
		defer it.Close()
		for it.Seek(blockSeekKey(st.num, m.head)); it.Valid(); it.Next() {
			b, ok := parseBlockKey(it.Item().Key())
			if !ok || b.lastSeq > last {
				return nil
			}
			if b.lastSeq == last {
				victim, size = it.Item().KeyCopy(nil), b.size
				return nil
			}
			first = b.lastSeq + 1
		}
		return nil
	})
	if err != nil || victim == nil {
		return 0, err // already gone: acknowledged or dropped meanwhile
	}
	n := m.addGap(Gap{First: first, Last: last, Reason: reason})
	if first == m.head {
		m.head = last + 1
	}
	if err := wb.Set(metaKey(st.num), m.encode()); err != nil {
		return 0, err
	}
	if err := wb.Delete(victim); err != nil {
		return 0, err
	}
	*bytes -= size
	return n, nil
}

// deleteBlocks deletes blocks from seq `from` on while del returns true. It
// returns the first block it kept (found is false if it reached the end of
// what is committed, or a key of the wrong shape).
func (s *Store) deleteBlocks(wb *badger.WriteBatch, st *Stream, from uint64, bytes *int64, del func(blockInfo) bool) (kept blockInfo, found bool, err error) {
	if blocks, ok := st.cachedFrom(from); ok {
		// The blocks an iterator from seq would visit, without one.
		for _, b := range blocks {
			if !del(b.info()) {
				return b.info(), true, nil
			}
			if err := wb.Delete(blockKey(st.num, b.last, b.appendMs, b.plain)); err != nil {
				return blockInfo{}, false, err
			}
			*bytes -= int64(b.plain)
		}
		return blockInfo{}, false, nil
	}
	if blocks, ok := st.indexedFrom(from); ok {
		// Keys a read found: no iterator, which would copy every block.
		for _, b := range blocks {
			if !del(b) {
				return b, true, nil
			}
			if err := wb.Delete(blockKey(st.num, b.lastSeq, b.appendMs, int(b.size))); err != nil {
				return blockInfo{}, false, err
			}
			*bytes -= b.size
		}
		// Every indexed block went: the rest is after the index's end.
		from = blocks[len(blocks)-1].lastSeq + 1
	}
	var keys [][]byte
	err = s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: streamBlockPrefix(st.num)})
		defer it.Close()
		for it.Seek(blockSeekKey(st.num, from)); it.Valid(); it.Next() {
			b, ok := parseBlockKey(it.Item().Key())
			if !ok || !del(b) {
				kept, found = b, ok
				break
			}
			keys = append(keys, it.Item().KeyCopy(nil))
			*bytes -= b.size
		}
		return nil
	})
	if err != nil {
		return blockInfo{}, false, err
	}
	for _, k := range keys {
		if err := wb.Delete(k); err != nil {
			return blockInfo{}, false, err
		}
	}
	return kept, found, nil
}

// sync makes what the committer wrote durable, timing it for
// edgeflow_buffer_sync_seconds.
func (s *Store) sync() error {
	start := time.Now()
	err := s.db.Sync()
	s.syncs.Observe(time.Since(start).Seconds())
	return err
}
