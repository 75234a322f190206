package hub

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"

	badger "github.com/dgraph-io/badger/v4"

	"edgeflow/aggregate"
)

// prefixPartials starts the keys of evicted aggregate partials at the
// base resolution (tier 0), and prefixTiers those of downsampled tiers:
//
//	a<generation:8><series:4><bucket:8, sign bit flipped>         -> encoded partial (tier 0)
//	d<generation:8><tier:1><series:4><bucket:8, sign bit flipped> -> encoded partial (tier >= 1)
//
// Tier 0 keeps the layout hubs wrote before downsampling existed, so an
// existing data directory reads as tier 0 with no migration; downsampled
// tiers get their own prefix with the tier byte ahead of the series. A
// generation is one engine lineage (a checkpoint chain); `hubd rebuild`
// writes a new one, so a rebuild that stops half way never mixes its
// partials with those the current checkpoint refers to.
const (
	prefixPartials = 'a'
	prefixTiers    = 'd'
)

// partialKeyLen and tierKeyLen are the lengths of the two key layouts.
const (
	partialKeyLen = 1 + 8 + 4 + 8
	tierKeyLen    = 1 + 8 + 1 + 4 + 8
)

// maxDeleteBatch bounds the keys one DeleteRange transaction deletes.
const maxDeleteBatch = 10_000

// badgerPartials is the engine's aggregate.PartialStore in the hub's Badger
// directory. Put (called by the engine while it holds its lock) only
// buffers; flush writes the buffer in one WriteBatch after each Apply and
// Tick. Reads see buffered partials first. Replace and DeleteRange (the
// engine's downsampling and retention, from Tick) write directly.
//
// Crash consistency: partials are written as they are evicted, not with
// checkpoints, so after a crash the store may hold partials evicted after
// the checkpoint. That is safe: replay after the checkpoint evicts the same
// partials at the same log positions (Put overwrites with the same bytes),
// and a partial reloaded during replay carries the largest log position it
// includes, so the engine skips replayed batches it already holds (see
// aggregate.Batch.Seq). A checkpoint syncs Badger, so every partial it
// refers to is durable. Replace deletes the fine partials and writes the
// coarse ones in one Badger transaction, so a crash leaves either the fine
// or the coarse partials of a span, never both nor neither.
type badgerPartials struct {
	mu      sync.Mutex
	db      *badger.DB // set by bind before the engine is used
	gen     uint64
	pending map[partialID][]byte
}

// partialID names one partial.
type partialID struct {
	tier   uint8
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

// partialKey is the key of a partial of any tier.
func partialKey(gen uint64, tier uint8, series uint32, bucket int64) []byte {
	if tier == 0 {
		k := make([]byte, partialKeyLen)
		k[0] = prefixPartials
		binary.BigEndian.PutUint64(k[1:], gen)
		binary.BigEndian.PutUint32(k[9:], series)
		binary.BigEndian.PutUint64(k[13:], uint64(bucket)^(1<<63))
		return k
	}
	k := make([]byte, tierKeyLen)
	k[0] = prefixTiers
	binary.BigEndian.PutUint64(k[1:], gen)
	k[9] = tier
	binary.BigEndian.PutUint32(k[10:], series)
	binary.BigEndian.PutUint64(k[14:], uint64(bucket)^(1<<63))
	return k
}

// seriesPrefix is the prefix of one tier's partials of a series.
func seriesPrefix(gen uint64, tier uint8, series uint32) []byte {
	k := partialKey(gen, tier, series, 0)
	return k[:len(k)-8]
}

func parsePartialKey(k []byte) (gen uint64, tier uint8, series uint32, bucket int64, ok bool) {
	switch {
	case len(k) == partialKeyLen && k[0] == prefixPartials:
		return binary.BigEndian.Uint64(k[1:]), 0, binary.BigEndian.Uint32(k[9:]), int64(binary.BigEndian.Uint64(k[13:]) ^ (1 << 63)), true
	case len(k) == tierKeyLen && k[0] == prefixTiers && k[9] > 0:
		return binary.BigEndian.Uint64(k[1:]), k[9], binary.BigEndian.Uint32(k[10:]), int64(binary.BigEndian.Uint64(k[14:]) ^ (1 << 63)), true
	}
	return 0, 0, 0, 0, false
}

// Put implements aggregate.PartialStore: it buffers data until flush.
func (p *badgerPartials) Put(tier uint8, series uint32, bucket int64, data []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pending[partialID{tier, series, bucket}] = data
	return nil
}

// Get implements aggregate.PartialStore.
func (p *badgerPartials) Get(tier uint8, series uint32, bucket int64) ([]byte, bool, error) {
	p.mu.Lock()
	data, ok := p.pending[partialID{tier, series, bucket}]
	gen := p.gen
	p.mu.Unlock()
	if ok {
		return data, true, nil
	}
	err := p.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(partialKey(gen, tier, series, bucket))
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
		return nil, false, fmt.Errorf("read partial %d/%d/%d: %w", tier, series, bucket, err)
	}
	return data, true, nil
}

// Scan implements aggregate.PartialStore. The buffer is copied before
// Badger is read: an entry that leaves the buffer meanwhile is in Badger.
func (p *badgerPartials) Scan(tier uint8, series uint32, from, to int64, fn func(int64, []byte) bool) error {
	type entry struct {
		bucket int64
		data   []byte
	}
	var buffered []entry
	p.mu.Lock()
	gen := p.gen
	for id, data := range p.pending {
		if id.tier == tier && id.series == series && id.bucket >= from && id.bucket < to {
			buffered = append(buffered, entry{id.bucket, data})
		}
	}
	p.mu.Unlock()
	slices.SortFunc(buffered, func(a, b entry) int { return cmp.Compare(a.bucket, b.bucket) })
	return p.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: seriesPrefix(gen, tier, series)})
		defer it.Close()
		end := partialKey(gen, tier, series, to)
		for it.Seek(partialKey(gen, tier, series, from)); it.Valid(); it.Next() {
			k := it.Item().Key()
			if bytes.Compare(k, end) >= 0 {
				break
			}
			_, _, _, bk, ok := parsePartialKey(k)
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
				return fmt.Errorf("read partial %d/%d/%d: %w", tier, series, bk, err)
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

// rangeKeys returns up to max keys of a tier's partials of a series with
// from <= bucket < to.
func rangeKeys(txn *badger.Txn, gen uint64, tier uint8, series uint32, from, to int64, max int) [][]byte {
	var keys [][]byte
	it := txn.NewIterator(badger.IteratorOptions{Prefix: seriesPrefix(gen, tier, series)})
	defer it.Close()
	end := partialKey(gen, tier, series, to)
	for it.Seek(partialKey(gen, tier, series, from)); it.Valid() && len(keys) < max; it.Next() {
		if bytes.Compare(it.Item().Key(), end) >= 0 {
			break
		}
		keys = append(keys, it.Item().KeyCopy(nil))
	}
	return keys
}

// dropPending forgets buffered partials of a tier's series in [from, to)
// (Replace and DeleteRange run on the goroutine that flushes, so none is
// being written meanwhile).
func (p *badgerPartials) dropPending(tier uint8, series uint32, from, to int64) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for id := range p.pending {
		if id.tier == tier && id.series == series && id.bucket >= from && id.bucket < to {
			delete(p.pending, id)
			n++
		}
	}
	return n
}

// Replace implements aggregate.PartialStore in one Badger transaction:
// the fine partials' deletes and the coarse partials' writes commit
// together or not at all.
func (p *badgerPartials) Replace(series uint32, from uint8, lo, hi int64, to uint8, puts []aggregate.StoredPartial) error {
	gen := p.generation()
	err := p.db.Update(func(txn *badger.Txn) error {
		for _, k := range rangeKeys(txn, gen, from, series, lo, hi, math.MaxInt) {
			if err := txn.Delete(k); err != nil {
				return err
			}
		}
		for _, sp := range puts {
			if err := txn.Set(partialKey(gen, to, series, sp.Bucket), sp.Data); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("downsample partials of series %d: %w", series, err)
	}
	p.dropPending(from, series, lo, hi)
	for _, sp := range puts {
		p.dropPending(to, series, sp.Bucket, sp.Bucket+1)
	}
	return nil
}

// DeleteRange implements aggregate.PartialStore, in transactions of at
// most maxDeleteBatch keys (deleting is idempotent: no atomicity needed).
func (p *badgerPartials) DeleteRange(tier uint8, series uint32, from, to int64) (int, error) {
	gen := p.generation()
	deleted := p.dropPending(tier, series, from, to)
	for {
		var keys [][]byte
		err := p.db.View(func(txn *badger.Txn) error {
			keys = rangeKeys(txn, gen, tier, series, from, to, maxDeleteBatch)
			return nil
		})
		if err == nil && len(keys) > 0 {
			err = deleteKeys(p.db, keys)
		}
		if err != nil {
			return deleted, fmt.Errorf("delete partials of series %d: %w", series, err)
		}
		deleted += len(keys)
		if len(keys) < maxDeleteBatch {
			return deleted, nil
		}
	}
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
		if err := wb.Set(partialKey(gen, id.tier, id.series, id.bucket), vals[i]); err != nil {
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
	for _, prefix := range []byte{prefixPartials, prefixTiers} {
		for {
			var keys [][]byte
			err := db.View(func(txn *badger.Txn) error {
				it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefix}})
				defer it.Close()
				for it.Rewind(); it.Valid() && len(keys) < retainBatch; it.Next() {
					gen, _, _, _, ok := parsePartialKey(it.Item().Key())
					if !ok || drop(gen) {
						keys = append(keys, it.Item().KeyCopy(nil))
					}
				}
				return nil
			})
			if err != nil {
				return deleted, err
			}
			if len(keys) == 0 {
				break
			}
			if err := deleteKeys(db, keys); err != nil {
				return deleted, err
			}
			deleted += len(keys)
		}
	}
	return deleted, nil
}

// maxPartialGeneration returns the largest generation of any stored
// partial (found is false when there are none).
func maxPartialGeneration(db *badger.DB) (gen uint64, found bool, err error) {
	err = db.View(func(txn *badger.Txn) error {
		for _, prefix := range []byte{prefixPartials, prefixTiers} {
			it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefix}, Reverse: true})
			it.Seek([]byte{prefix, 0xff})
			if it.Valid() {
				if g, _, _, _, ok := parsePartialKey(it.Item().Key()); ok {
					gen, found = max(gen, g), true
				}
			}
			it.Close()
		}
		return nil
	})
	return gen, found, err
}
