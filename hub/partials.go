package hub

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"

	badger "github.com/dgraph-io/badger/v4"
)

// prefixPartials starts the keys of evicted aggregate partials:
//
//	a<generation:8><series:4><bucket:8, sign bit flipped> -> encoded partial
//
// A generation is one engine lineage (a checkpoint chain); `hubd rebuild`
// writes a new one, so a rebuild that stops half way never mixes its
// partials with those the current checkpoint refers to.
const prefixPartials = 'a'

// partialKeyLen is the length of a partial key.
const partialKeyLen = 1 + 8 + 4 + 8

// badgerPartials is the engine's aggregate.PartialStore in the hub's Badger
// directory. Put (called by the engine while it holds its lock) only
// buffers; flush writes the buffer in one WriteBatch after each Apply and
// Tick. Reads see buffered partials first.
//
// Crash consistency: partials are written as they are evicted, not with
// checkpoints, so after a crash the store may hold partials evicted after
// the checkpoint. That is safe: replay after the checkpoint evicts the same
// partials at the same log positions (Put overwrites with the same bytes),
// and a partial reloaded during replay carries the largest log position it
// includes, so the engine skips replayed batches it already holds (see
// aggregate.Batch.Seq). A checkpoint syncs Badger, so every partial it
// refers to is durable.
type badgerPartials struct {
	mu      sync.Mutex
	db      *badger.DB // set by bind before the engine is used
	gen     uint64
	pending map[partialID][]byte
}

// partialID names one partial.
type partialID struct {
	series uint32
	bucket int64
}

func newBadgerPartials() *badgerPartials {
	return &badgerPartials{pending: map[partialID][]byte{}}
}

// bind attaches the store to the hub's Badger DB (opened in Start).
func (p *badgerPartials) bind(db *badger.DB) { p.db = db }

// setGeneration selects the lineage the store reads and writes.
func (p *badgerPartials) setGeneration(gen uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gen = gen
	clear(p.pending)
}

func (p *badgerPartials) generation() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gen
}

func partialKey(gen uint64, series uint32, bucket int64) []byte {
	k := make([]byte, partialKeyLen)
	k[0] = prefixPartials
	binary.BigEndian.PutUint64(k[1:], gen)
	binary.BigEndian.PutUint32(k[9:], series)
	binary.BigEndian.PutUint64(k[13:], uint64(bucket)^(1<<63))
	return k
}

func seriesPrefix(gen uint64, series uint32) []byte { return partialKey(gen, series, 0)[:13] }

func parsePartialKey(k []byte) (gen uint64, series uint32, bucket int64, ok bool) {
	if len(k) != partialKeyLen || k[0] != prefixPartials {
		return 0, 0, 0, false
	}
	return binary.BigEndian.Uint64(k[1:]), binary.BigEndian.Uint32(k[9:]), int64(binary.BigEndian.Uint64(k[13:]) ^ (1 << 63)), true
}

// Put implements aggregate.PartialStore: it buffers data until flush.
func (p *badgerPartials) Put(series uint32, bucket int64, data []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pending[partialID{series, bucket}] = data
	return nil
}

// Get implements aggregate.PartialStore.
func (p *badgerPartials) Get(series uint32, bucket int64) ([]byte, bool, error) {
	p.mu.Lock()
	data, ok := p.pending[partialID{series, bucket}]
	gen := p.gen
	p.mu.Unlock()
	if ok {
		return data, true, nil
	}
	err := p.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(partialKey(gen, series, bucket))
		if err != nil {
			return err
		}
		data, err = item.ValueCopy(nil)
		return err
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read partial %d/%d: %w", series, bucket, err)
	}
	return data, true, nil
}

// Scan implements aggregate.PartialStore. The buffer is copied before
// Badger is read: an entry that leaves the buffer meanwhile is in Badger.
func (p *badgerPartials) Scan(series uint32, from, to int64, fn func(int64, []byte) bool) error {
	type entry struct {
		bucket int64
		data   []byte
	}
	var buffered []entry
	p.mu.Lock()
	gen := p.gen
	for id, data := range p.pending {
		if id.series == series && id.bucket >= from && id.bucket < to {
			buffered = append(buffered, entry{id.bucket, data})
		}
	}
	p.mu.Unlock()
	slices.SortFunc(buffered, func(a, b entry) int { return cmp.Compare(a.bucket, b.bucket) })
	return p.db.View(func(txn *badger.Txn) error {
		prefix := seriesPrefix(gen, series)
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer it.Close()
		end := partialKey(gen, series, to)
		for it.Seek(partialKey(gen, series, from)); it.Valid(); it.Next() {
			k := it.Item().Key()
			if bytes.Compare(k, end) >= 0 {
				break
			}
			_, _, bk, ok := parsePartialKey(k)
			if !ok {
				return fmt.Errorf("%w: partial key %x", ErrCorrupt, k)
			}
			newer := false
			for len(buffered) > 0 && buffered[0].bucket <= bk {
				if !fn(buffered[0].bucket, buffered[0].data) {
					return nil
				}
				newer = buffered[0].bucket == bk // the buffered version replaces the stored one
				buffered = buffered[1:]
			}
			if newer {
				continue
			}
			var cont bool
			if err := it.Item().Value(func(v []byte) error { cont = fn(bk, v); return nil }); err != nil {
				return fmt.Errorf("read partial %d/%d: %w", series, bk, err)
			}
			if !cont {
				return nil
			}
		}
		for _, e := range buffered {
			if !fn(e.bucket, e.data) {
				return nil
			}
		}
		return nil
	})
}

// flush writes the buffered partials. Only the goroutine that calls the
// engine's Apply and Tick calls it, so no Put runs meanwhile; entries leave
// the buffer only once written, and stay for the next flush on error.
func (p *badgerPartials) flush() error {
	p.mu.Lock()
	if len(p.pending) == 0 {
		p.mu.Unlock()
		return nil
	}
	gen := p.gen
	ids := make([]partialID, 0, len(p.pending))
	vals := make([][]byte, 0, len(p.pending))
	for id, v := range p.pending {
		ids = append(ids, id)
		vals = append(vals, v)
	}
	p.mu.Unlock()
	wb := p.db.NewWriteBatch()
	for i, id := range ids {
		if err := wb.Set(partialKey(gen, id.series, id.bucket), vals[i]); err != nil {
			wb.Cancel()
			return fmt.Errorf("write evicted partials: %w", err)
		}
	}
	if err := wb.Flush(); err != nil {
		return fmt.Errorf("write evicted partials: %w", err)
	}
	p.mu.Lock()
	for _, id := range ids {
		delete(p.pending, id)
	}
	p.mu.Unlock()
	return nil
}

// dropGenerations deletes the partials of the generations drop selects;
// it returns how many it deleted.
func dropGenerations(db *badger.DB, drop func(gen uint64) bool) (int, error) {
	deleted := 0
	for {
		var keys [][]byte
		err := db.View(func(txn *badger.Txn) error {
			it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixPartials}})
			defer it.Close()
			for it.Rewind(); it.Valid() && len(keys) < retainBatch; it.Next() {
				gen, _, _, ok := parsePartialKey(it.Item().Key())
				if !ok || drop(gen) {
					keys = append(keys, it.Item().KeyCopy(nil))
				}
			}
			return nil
		})
		if err != nil || len(keys) == 0 {
			return deleted, err
		}
		if err := deleteKeys(db, keys); err != nil {
			return deleted, err
		}
		deleted += len(keys)
	}
}
