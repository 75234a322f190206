package buffer

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/dgraph-io/badger/v4"

	"edgeflow/wire"
)

// Range is a closed range of sequence numbers.
type Range struct{ First, Last uint64 }

// Len is the number of sequence numbers in r.
func (r Range) Len() uint64 { return r.Last - r.First + 1 }

// Record is one stored record and its sequence number. Data is the
// caller's to keep; it may share a backing array with other records of the
// same read, capped so appending to it never overwrites a neighbour.
type Record struct {
	Seq  uint64
	Data []byte
}

// Stream is one durable FIFO log inside a Store. Its methods are safe for
// concurrent use.
type Stream struct {
	s    *Store
	name string
	num  uint32
	opts StreamOptions

	mu      sync.Mutex
	m       meta
	bytes   int64 // record block bytes between head and next
	pending int64 // bytes submitted but not yet committed
	oldest  int64 // append time (Unix ms) of the first held block, 0 when empty
	// readable bounds what readers see: one past the last record that is
	// durable per the store's mode. Until records are durable the uplink
	// must not send them: a hub that applied records a power loss then took
	// from the buffer would see their reused sequence numbers as duplicates.
	readable uint64
	space    chan struct{}
	// more gets a value (never blocking) each time readable advances.
	more chan struct{}
	// tail is the tail cache's copy of the stream's newest blocks, oldest
	// first, and tailBytes what they cost (see tailcache.go). The committer
	// replaces the slice, never changes it, so a reader may use the slice
	// it copied under mu after unlocking.
	tail      []tailBlock
	tailBytes int64
	// keys lists the block keys reads found in Badger, for acks to delete
	// them without an iterator (see keyindex.go).
	keys keyIndex
	// fill samples bytes for the fill rate (fill.go).
	fill fillRing

	appended, acked, dropped atomic.Uint64
}

// loadStream reads or creates a stream's metadata and measures its blocks.
func (s *Store) loadStream(name string, opts StreamOptions) (*Stream, error) {
	st := &Stream{s: s, name: name, opts: opts, space: make(chan struct{}), more: make(chan struct{}, 1)}
	defer func() { st.fill.observe(s.opts.Now().UnixMilli(), st.bytes) }() // the fill rate starts at open
	err := s.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(nameKey(name))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return errNew
		}
		if err != nil {
			return err
		}
		v, err := item.ValueCopy(nil)
		if err != nil {
			return err
		}
		if len(v) != 4 {
			return fmt.Errorf("%w: stream number of %q is %d bytes", ErrCorrupt, name, len(v))
		}
		st.num = binary.BigEndian.Uint32(v)
		item, err = txn.Get(metaKey(st.num))
		if err != nil {
			return fmt.Errorf("%w: stream %q has no metadata: %v", ErrCorrupt, name, err)
		}
		return item.Value(func(v []byte) error {
			st.m, err = decodeMeta(v)
			return err
		})
	})
	switch {
	case errors.Is(err, errNew):
		return st, s.createStream(st)
	case err != nil:
		return nil, fmt.Errorf("buffer %s: stream %q: %w", s.dir, name, err)
	}
	if err := s.dropReclaimKey(st.num); err != nil {
		return nil, fmt.Errorf("buffer %s: stream %q: %w", s.dir, name, err)
	}
	if err := st.scan(); err != nil {
		return nil, fmt.Errorf("buffer %s: stream %q: %w", s.dir, name, err)
	}
	if err := st.removeGarbage(); err != nil {
		return nil, fmt.Errorf("buffer %s: stream %q: remove blocks below head: %w", s.dir, name, err)
	}
	st.readable = st.m.next
	return st, nil
}

// removeGarbage deletes blocks that lie wholly below the head: a crash
// between writing metadata and the deletes it justified leaves them.
func (st *Stream) removeGarbage() error {
	wb := st.s.db.NewWriteBatch()
	defer wb.Cancel()
	var ignored int64
	head := st.m.head
	if _, _, err := st.s.deleteBlocks(wb, st, 0, &ignored, func(b blockInfo) bool { return b.lastSeq < head }); err != nil {
		return err
	}
	return wb.Flush()
}

func (s *Store) createStream(st *Stream) error {
	st.num = s.nextNum
	s.nextNum++
	st.m = meta{id: wire.NewStreamID(), head: 1, next: 1, created: s.opts.Now().UnixMilli()}
	st.readable = 1
	err := s.db.Update(func(txn *badger.Txn) error {
		if err := txn.Set(nameKey(st.name), binary.BigEndian.AppendUint32(nil, st.num)); err != nil {
			return err
		}
		return txn.Set(metaKey(st.num), st.m.encode())
	})
	if err == nil {
		err = s.db.Sync()
	}
	if err != nil {
		return fmt.Errorf("buffer %s: create stream %q: %w", s.dir, st.name, err)
	}
	return nil
}

// scan measures the stream's live blocks and finds the next sequence number;
// it is how a restart recovers positions that only the block keys record.
func (st *Stream) scan() error {
	return st.s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: streamBlockPrefix(st.num)})
		defer it.Close()
		for it.Seek(blockSeekKey(st.num, st.m.head)); it.Valid(); it.Next() {
			b, ok := parseBlockKey(it.Item().Key())
			if !ok {
				return fmt.Errorf("%w: block key %x has the wrong shape", ErrCorrupt, it.Item().Key())
			}
			st.bytes += b.size
			if st.oldest == 0 {
				st.oldest = b.appendMs
			}
			if b.lastSeq >= st.m.next {
				st.m.next = b.lastSeq + 1
			}
		}
		return nil
	})
}

// Name is the name the stream was opened with (the agent uses its device id).
func (st *Stream) Name() string { return st.name }

// ID is the random stream id created with the stream.
func (st *Stream) ID() wire.StreamID {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.m.id
}

// AppendOptions modify one Append.
type AppendOptions struct {
	// WaitDurable makes Append in DurabilityInterval wait for the next sync,
	// so the events survive power loss when it returns.
	WaitDurable bool
}

// Append stores records (encoded events) and returns the consecutive range
// of sequence numbers they got. With DropOldest it may drop older records to
// make room (reported by Gaps); with Reject it fails with ErrFull; with Block
// it waits for an Ack to free space or for ctx to end.
func (st *Stream) Append(ctx context.Context, recs [][]byte, ao ...AppendOptions) (Range, error) {
	if len(recs) == 0 {
		return Range{}, errors.New("buffer: append of no records")
	}
	size := int64(0)
	for _, r := range recs {
		if len(r) > st.s.opts.MaxBlockBytes {
			return Range{}, fmt.Errorf("%w: record of %d bytes, limit %d", ErrTooLarge, len(r), st.s.opts.MaxBlockBytes)
		}
		size += int64(len(r)) + 4
	}
	if size > st.opts.MaxBytes {
		return Range{}, fmt.Errorf("%w: %d bytes, stream bound %d", ErrTooLarge, size, st.opts.MaxBytes)
	}
	diskDrop, err := st.s.disk.admit(ctx, st, size)
	if err != nil {
		return Range{}, err
	}
	defer st.s.disk.release(size)
	if err := st.reserve(ctx, size); err != nil {
		return Range{}, err
	}
	o := &op{kind: opAppend, st: st, recs: recs, size: size, diskDrop: diskDrop}
	if len(ao) > 0 && ao[0].WaitDurable {
		o.wait = true
	}
	if err := st.s.submit(o); err != nil {
		st.mu.Lock()
		st.pending -= size
		st.mu.Unlock()
		return Range{}, err
	}
	return o.res, o.err
}

// reserve applies the full policy before an append is queued.
func (st *Stream) reserve(ctx context.Context, size int64) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	for st.opts.Full != DropOldest && st.bytes+st.pending+size > st.opts.MaxBytes {
		if st.opts.Full == Reject {
			return fmt.Errorf("%w: stream %q holds %d of %d bytes", ErrFull, st.name, st.bytes+st.pending, st.opts.MaxBytes)
		}
		space := st.space
		st.mu.Unlock()
		select {
		case <-space:
		case <-ctx.Done():
			st.mu.Lock()
			return fmt.Errorf("buffer: waiting for space in stream %q: %w", st.name, ctx.Err())
		}
		st.mu.Lock()
	}
	st.pending += size
	return nil
}

// publish makes records up to next (exclusive) visible to readers once
// they are durable.
func (st *Stream) publish(next uint64) {
	st.mu.Lock()
	advanced := next > st.readable
	st.readable = max(st.readable, next)
	st.mu.Unlock()
	if advanced {
		st.signalMore()
	}
}

// signalMore tells a reader waiting on Readable that there is more.
func (st *Stream) signalMore() {
	select {
	case st.more <- struct{}{}:
	default:
	}
}

// Readable gets a value whenever records become readable (committed, and
// synced in the interval mode), so a reader such as the uplink can wait
// for them instead of polling. One value may stand for several advances;
// the channel is for one reader.
func (st *Stream) Readable() <-chan struct{} { return st.more }

// freed wakes appenders blocked for space; st.mu is held.
func (st *Stream) freed() {
	close(st.space)
	st.space = make(chan struct{})
}

// readPrealloc bounds the records ReadFrom allocates room for up front.
const readPrealloc = 1 << 14

// ReadFrom returns up to maxEvents records with sequence numbers from seq on
// (from the head if seq is below it), stopping before maxBytes of record
// data unless that would return nothing. A corrupt block is dropped as a gap
// with reason "corrupt" and reading goes on after it.
func (st *Stream) ReadFrom(seq uint64, maxEvents, maxBytes int) ([]Record, error) {
	if maxEvents <= 0 {
		return nil, nil
	}
	var out []Record
	size := 0
	err := st.visitBlocks(seq, true, func(br *blockReader, from uint64) (bool, error) {
		if out == nil {
			out = make([]Record, 0, min(maxEvents, readPrealloc))
		}
		for {
			s, rec, ok, err := br.next()
			if err != nil || !ok {
				return len(out) == maxEvents || size > maxBytes, err
			}
			if s < from {
				continue
			}
			if len(out) == maxEvents || (len(out) > 0 && size+len(rec) > maxBytes) {
				return true, nil
			}
			// The block was copied for this read, so records may point
			// into it: one allocation per block, not one per record.
			out = append(out, Record{Seq: s, Data: rec[:len(rec):len(rec)]})
			size += len(rec)
		}
	})
	return out, err
}

// Scan calls fn with up to maxEvents records with sequence numbers from seq
// on (from the head if seq is below it), in order, stopping before maxBytes
// of record data unless that would give nothing, or at the first record fn
// declines (returns false). rec is valid only during the call and must not
// be modified (it may be the store's own copy): Scan copies nothing, so a
// caller that builds something from the records (the uplink's batches)
// pays no copy it does not need; one that keeps them uses ReadFrom.
// Corrupt blocks are handled as ReadFrom does. It returns the number of
// records fn took.
func (st *Stream) Scan(seq uint64, maxEvents, maxBytes int, fn func(seq uint64, rec []byte) bool) (int, error) {
	return st.ScanBlocks(seq, maxEvents, maxBytes, func(seq uint64, rec []byte, _ Range, _ bool) bool { return fn(seq, rec) })
}

// ScanBlocks is Scan also handing fn the range of the block each record is
// stored in and whether that block is a column chunk (one ScanColumns
// hands out), so a reader can cut its batches where such blocks end (the
// uplink keeps batches on the boundaries of blocks it can send as stored).
func (st *Stream) ScanBlocks(seq uint64, maxEvents, maxBytes int, fn func(seq uint64, rec []byte, block Range, columns bool) bool) (int, error) {
	if maxEvents <= 0 {
		return 0, nil
	}
	n, size := 0, 0
	err := st.visitBlocks(seq, false, func(br *blockReader, from uint64) (bool, error) {
		block := Range{First: br.firstSeq, Last: br.firstSeq + br.count - 1}
		for {
			s, rec, ok, err := br.next()
			if err != nil || !ok {
				return n == maxEvents || size > maxBytes, err
			}
			if s < from {
				continue
			}
			if n == maxEvents || (n > 0 && size+len(rec) > maxBytes) || !fn(s, rec, block, br.columns) {
				return true, nil
			}
			n++
			size += len(rec)
		}
	})
	return n, err
}

// ColumnBlock is a block stored as a column chunk (CompressColumns), as
// ScanColumns hands it out.
type ColumnBlock struct {
	First, Last uint64 // its records' sequence numbers
	// Chunk is the records' column chunk (wire.AppendColumnChunk), valid
	// only during the call and not to be modified.
	Chunk []byte
	// Plain is the length of the block's records as a plain block, what
	// stream bounds count.
	Plain int
}

// ScanColumns calls fn with the stream's blocks from seq on, in order, as
// long as each is stored as a column chunk and starts where the previous
// one ended (the first at seq, or at the head if seq is below it), until
// fn returns false or the readable records end. It returns how many
// blocks fn accepted. A block of another kind, one holding seq but
// starting below it, or a range dropped in between ends the scan, and the
// caller reads the rest with Scan. A corrupt block ends it too and is
// dropped as a gap, as with Scan.
func (st *Stream) ScanColumns(seq uint64, fn func(b ColumnBlock) bool) (int, error) {
	n, want := 0, uint64(0)
	err := st.visitRaw(seq, func(v []byte, lastSeq uint64, plain int, from uint64) (bool, error) {
		if n == 0 {
			want = from
		}
		first, count, chunk, ok, err := openColumns(v, lastSeq)
		if err != nil || !ok || first != want {
			return true, err
		}
		if !fn(ColumnBlock{First: first, Last: first + count - 1, Chunk: chunk, Plain: plain}) {
			return true, nil
		}
		n++
		want = lastSeq + 1
		return false, nil
	})
	return n, err
}

// visitBlocks calls fn with a reader over each block that holds sequence
// numbers from seq on (raised to the head), in order, until fn reports that
// the read is done. from is the first sequence number wanted. The records
// may be Badger's bytes or the tail cache's, valid only during the call and
// not to be modified, unless copyValue is set. Corrupt blocks are logged and
// skipped, then dropped as gaps once the read has ended.
//
// A read that the tail cache holds every block for is answered from it;
// any other goes to Badger as a whole. Both hand fn the same blocks.
func (st *Stream) visitBlocks(seq uint64, copyValue bool, fn func(br *blockReader, from uint64) (done bool, err error)) error {
	return st.visit(blockRead{own: copyValue, fn: fn}, seq)
}

// visitRaw is visitBlocks handing fn each block's stored value, unopened,
// with its last sequence number, its plain length and the first sequence
// number wanted. A value fn finds corrupt (an error wrapping ErrCorrupt)
// is logged and dropped as a gap, and ends the read.
func (st *Stream) visitRaw(seq uint64, fn func(v []byte, lastSeq uint64, plain int, from uint64) (done bool, err error)) error {
	return st.visit(blockRead{raw: fn}, seq)
}

// visit runs the read r, whose callback is set, from seq.
func (st *Stream) visit(r blockRead, seq uint64) error {
	if err := st.s.enter(); err != nil {
		return err
	}
	defer st.s.closeMu.RUnlock()
	st.mu.Lock()
	head, next, tail := st.m.head, st.readable, st.tail
	st.mu.Unlock()
	seq = max(seq, head)
	if seq >= next {
		return nil
	}
	r.st, r.seq, r.next, r.prevLast = st, seq, next, seq-1
	if !r.own && r.raw == nil {
		r.scratch = scratchBufs.Get().(*[]byte)
		defer scratchBufs.Put(r.scratch)
	}
	var err error
	if blocks, ok := st.s.tail.lookup(tail, seq, next); ok {
		err = r.fromTail(blocks)
	} else {
		err = r.fromBadger()
	}
	if err != nil {
		return fmt.Errorf("buffer %s: read stream %q from %d: %w", st.s.dir, st.name, seq, err)
	}
	for _, c := range r.corrupt {
		if err := st.s.submit(&op{kind: opDropBlock, st: st, upTo: c.Last, reason: ReasonCorrupt}); err != nil {
			return err
		}
	}
	return nil
}

// blockRead is one visitBlocks pass: the positions it read at, its callback
// and the corrupt blocks it found.
type blockRead struct {
	st        *Stream
	seq, next uint64 // first sequence number wanted; readable bound
	own       bool   // records must outlive the read
	fn        func(br *blockReader, from uint64) (done bool, err error)
	// raw, if set, takes the blocks' values unopened instead of fn.
	raw      func(v []byte, lastSeq uint64, plain int, from uint64) (done bool, err error)
	prevLast uint64 // last sequence number of the previous block
	corrupt  []Range
	scratch  *[]byte // decoded block, reused block to block (not with own)
}

// scratchBufs holds the buffers reads decode compressed blocks into, so a
// backlog drained block by block does not allocate (and zero) one per block.
var scratchBufs = sync.Pool{New: func() any { return new([]byte) }}

// fromTail reads cached blocks, the first of them holding r.seq.
func (r *blockRead) fromTail(blocks []tailBlock) error {
	for _, b := range blocks {
		if b.last >= r.next {
			return nil // not yet readable, as in fromBadger
		}
		if done, err := r.block(b.v, b.last, b.plain); done || err != nil {
			return err
		}
	}
	return nil
}

// fromBadger reads blocks from Badger, seeking to the one that holds r.seq.
func (r *blockRead) fromBadger() error {
	st := r.st
	gen := st.indexGen()
	var found []blockInfo
	err := st.s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: streamBlockPrefix(st.num)})
		defer it.Close()
		// The loop returns as soon as fn is done rather than stepping on:
		// Badger copies every value the iterator moves onto, so a read that
		// ends on a block boundary must not touch the next block.
		for it.Seek(blockSeekKey(st.num, r.seq)); it.Valid(); it.Next() {
			b, ok := parseBlockKey(it.Item().Key())
			if !ok {
				return fmt.Errorf("%w: block key %x has the wrong shape", ErrCorrupt, it.Item().Key())
			}
			if b.lastSeq >= r.next {
				// Written but not yet durable (or not yet published by the
				// committer): blocks are whole, so nothing here is readable.
				return nil
			}
			found = append(found, b)
			done := false
			err := it.Item().Value(func(v []byte) (err error) {
				done, err = r.block(v, b.lastSeq, int(b.size))
				return err
			})
			if done || err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		st.publishKeys(gen, r.seq, found)
	}
	return err
}

// block hands one block's value, whichever source it came from, to fn. A
// corrupt block is logged and noted for dropping, and the read goes on.
func (r *blockRead) block(v []byte, lastSeq uint64, plain int) (done bool, err error) {
	first := r.prevLast + 1
	r.prevLast = lastSeq
	if r.raw != nil {
		done, err := r.raw(v, lastSeq, plain, r.seq)
		if errors.Is(err, ErrCorrupt) {
			r.dropCorrupt(first, lastSeq, err)
			return true, nil
		}
		return done, err
	}
	br, err := openBlock(v, lastSeq, r.own, r.scratch)
	if err != nil {
		r.dropCorrupt(first, lastSeq, err)
		return false, nil
	}
	return r.fn(&br, r.seq)
}

// dropCorrupt logs a corrupt block and notes it for dropping as a gap.
func (r *blockRead) dropCorrupt(first, last uint64, err error) {
	st := r.st
	st.s.opts.Logger.Error("buffer: dropping corrupt block", "dir", st.s.dir, "stream", st.name, "first", first, "last", last, "err", err)
	r.corrupt = append(r.corrupt, Range{first, last})
}

// Ack frees every record with a sequence number up to upTo: the hub has them.
// The acknowledged position survives restarts. Acking below the current
// position is a no-op; acking beyond the last appended record is an error.
func (st *Stream) Ack(upTo uint64) error {
	st.mu.Lock()
	acked, next := st.m.acked, st.m.next
	st.mu.Unlock()
	if upTo >= next {
		return fmt.Errorf("buffer: stream %q: ack of %d beyond last appended %d", st.name, upTo, next-1)
	}
	if upTo <= acked {
		return nil
	}
	return st.s.submit(&op{kind: opAck, st: st, upTo: upTo})
}

// Gaps returns the ranges the stream dropped that no Ack has covered yet.
func (st *Stream) Gaps() []Gap {
	st.mu.Lock()
	defer st.mu.Unlock()
	return append([]Gap(nil), st.m.gaps...)
}

// Stats is a snapshot of a stream's positions and totals.
type Stats struct {
	Acked    uint64 // every seq <= Acked is acknowledged
	Head     uint64 // first seq still held
	Next     uint64 // seq the next Append gets
	Readable uint64 // records below it can be read (the interval mode holds the rest until a sync)
	Depth    uint64 // records held (Next - Head)
	Bytes    int64  // bytes held, as uncompressed blocks
	OldestMs int64  // append time of the oldest held block, Unix ms (0: empty)
	Gaps     int    // pending gap ranges

	Appended, AckedTotal, Dropped uint64 // since the store was opened
}

// Stats returns the stream's positions and totals.
func (st *Stream) Stats() Stats {
	st.mu.Lock()
	s := Stats{Acked: st.m.acked, Head: st.m.head, Next: st.m.next, Readable: min(st.readable, st.m.next), Depth: st.m.next - st.m.head, Bytes: st.bytes, OldestMs: st.oldest, Gaps: len(st.m.gaps)}
	st.mu.Unlock()
	s.Appended, s.AckedTotal, s.Dropped = st.appended.Load(), st.acked.Load(), st.dropped.Load()
	return s
}

// oldestMs reads the append time of the first block at or after head. The
// committer calls it when the head moves, so Stats never touches Badger.
func (st *Stream) oldestMs(head uint64) int64 {
	var ms int64
	_ = st.s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: streamBlockPrefix(st.num)})
		defer it.Close()
		it.Seek(blockSeekKey(st.num, head))
		if it.Valid() {
			if b, ok := parseBlockKey(it.Item().Key()); ok {
				ms = b.appendMs
			}
		}
		return nil
	})
	return ms
}
