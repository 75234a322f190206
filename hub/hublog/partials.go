package hublog

import (
	"bytes"
	"cmp"
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

// partialKeyLen and tierKeyLen are the lengths of the two key layouts.
const (
	partialKeyLen = 1 + 8 + 4 + 8
	tierKeyLen    = 1 + 8 + 1 + 4 + 8
)

// retainBatch bounds the deletions of one retention transaction.
const RetainBatch = 10000

// maxDeleteBatch bounds the keys one DeleteRange transaction deletes.
const maxDeleteBatch = 10_000

// BadgerPartials is the engine's aggregate.PartialStore in the hub's Badger
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
type BadgerPartials struct {
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

func NewBadgerPartials() *BadgerPartials {
	return &BadgerPartials{pending: map[partialID][]byte{}}
}

// bind attaches the store to the hub's Badger DB (opened in Start).
func (p *BadgerPartials) Bind(db *badger.DB) { p.db = db }

// setGeneration selects the lineage the store reads and writes.
func (p *BadgerPartials) SetGeneration(gen uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gen = gen
	clear(p.pending)
}

func (p *BadgerPartials) Generation() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gen
}

// Put implements aggregate.PartialStore: it buffers data until flush.
func (p *BadgerPartials) Put(tier uint8, series uint32, bucket int64, data []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pending[partialID{tier, series, bucket}] = data
	return nil
}

// Get implements aggregate.PartialStore.
func (p *BadgerPartials) Get(tier uint8, series uint32, bucket int64) ([]byte, bool, error) {
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
func (p *BadgerPartials) Scan(tier uint8, series uint32, from, to int64, fn func(int64, []byte) bool) error {
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
func (p *BadgerPartials) dropPending(tier uint8, series uint32, from, to int64) int {
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
func (p *BadgerPartials) Replace(series uint32, from uint8, lo, hi int64, to uint8, puts []aggregate.StoredPartial) error {
	gen := p.Generation()
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
func (p *BadgerPartials) DeleteRange(tier uint8, series uint32, from, to int64) (int, error) {
	gen := p.Generation()
	deleted := p.dropPending(tier, series, from, to)
	for {
		var keys [][]byte
		err := p.db.View(func(txn *badger.Txn) error {
			keys = rangeKeys(txn, gen, tier, series, from, to, maxDeleteBatch)
			return nil
		})
		if err == nil && len(keys) > 0 {
			err = DeleteKeys(p.db, keys)
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
func (p *BadgerPartials) Flush() error {
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
func DropGenerations(db *badger.DB, drop func(gen uint64) bool) (int, error) {
	deleted := 0
	for _, prefix := range []byte{PrefixPartials, prefixTiers} {
		for {
			var keys [][]byte
			err := db.View(func(txn *badger.Txn) error {
				it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefix}})
				defer it.Close()
				for it.Rewind(); it.Valid() && len(keys) < RetainBatch; it.Next() {
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
			if err := DeleteKeys(db, keys); err != nil {
				return deleted, err
			}
			deleted += len(keys)
		}
	}
	return deleted, nil
}

// maxPartialGeneration returns the largest generation of any stored
// partial (found is false when there are none).
func MaxPartialGeneration(db *badger.DB) (gen uint64, found bool, err error) {
	err = db.View(func(txn *badger.Txn) error {
		for _, prefix := range []byte{PrefixPartials, prefixTiers} {
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
