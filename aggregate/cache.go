package aggregate

import (
	"container/list"
	"sync"
)

// cacheBlockBuckets is how many consecutive buckets of one series a cache
// entry holds (an hour at the default 10 s resolution).
const cacheBlockBuckets = 360

// blockKey names one cache entry: a tier, a series and a block of
// buckets. A tier's blocks hold cacheBlockBuckets of its partials (see
// Engine.blockSpan).
type blockKey struct {
	tier   uint8
	series uint32
	block  int64 // bucket / blockSpan(tier)
}

// cacheBlock is the decoded stored partials of one block, ascending by
// bucket. They are read only: queries share them (sketches included).
type cacheBlock struct {
	key   blockKey
	parts []partial
	need  need // what was decoded of the quantile state
}

// partCache keeps decoded partials read from the store by recent queries,
// so a dashboard that asks for yesterday again does not read and decode
// it again. It holds at most max partials, least recently used blocks
// leave first. Final partials change only when late data reloads and
// re-evicts them, or when downsampling and retention rewrite them; the
// engine invalidates the blocks it changes on every Put, Replace and
// DeleteRange.
type partCache struct {
	mu           sync.Mutex
	max, n       int
	blocks       map[blockKey]*list.Element
	lru          list.List // front: most recently used *cacheBlock
	hits, misses uint64
}

func newPartCache(max int) *partCache {
	return &partCache{max: max, blocks: map[blockKey]*list.Element{}}
}

// get returns a cached block decoded at least as far as n asks.
func (c *partCache) get(k blockKey, n need) ([]partial, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.blocks[k]
	if !ok || el.Value.(*cacheBlock).need < n {
		c.misses++
		return nil, false
	}
	c.hits++
	c.lru.MoveToFront(el)
	return el.Value.(*cacheBlock).parts, true
}

// contains reports whether get would find the block, without counting.
func (c *partCache) contains(k blockKey, n need) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.blocks[k]
	return ok && el.Value.(*cacheBlock).need >= n
}

// missed counts n more blocks read from the store.
func (c *partCache) missed(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.misses += uint64(max(n, 0))
}

// add caches a block, replacing an older entry and evicting the least
// recently used blocks beyond max partials.
func (c *partCache) add(k blockKey, parts []partial, n need) {
	if weight(parts) > c.max {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.removeLocked(k)
	c.blocks[k] = c.lru.PushFront(&cacheBlock{key: k, parts: parts, need: n})
	c.n += weight(parts)
	for c.n > c.max {
		c.removeLocked(c.lru.Back().Value.(*cacheBlock).key)
	}
}

// invalidate drops a block.
func (c *partCache) invalidate(k blockKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.removeLocked(k)
}

// invalidateRange drops the blocks of a tier's series that hold buckets
// in [from, to), blocks of span buckets.
func (c *partCache) invalidateRange(tier uint8, series uint32, from, to, span int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b0, b1 := floorDiv(from, span), floorDiv(to-1, span)
	if from >= to {
		return
	}
	if b1-b0 > int64(len(c.blocks)) { // a wide range: look at what is cached
		for k := range c.blocks {
			if k.tier == tier && k.series == series && k.block >= b0 && k.block <= b1 {
				c.removeLocked(k)
			}
		}
		return
	}
	for b := b0; b <= b1; b++ {
		c.removeLocked(blockKey{tier, series, b})
	}
}

func (c *partCache) removeLocked(k blockKey) {
	if el, ok := c.blocks[k]; ok {
		c.n -= weight(el.Value.(*cacheBlock).parts)
		c.lru.Remove(el)
		delete(c.blocks, k)
	}
}

// weight is what a block counts against the bound: its partials, and at
// least one so that cached empty blocks (holes in a series) stay bounded.
func weight(parts []partial) int { return max(len(parts), 1) }

// reset empties the cache (the store's content was replaced).
func (c *partCache) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.blocks)
	c.lru.Init()
	c.n = 0
}

// stats returns hits, misses and the partials held (empty blocks count
// one).
func (c *partCache) stats() (hits, misses uint64, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hits, c.misses, c.n
}
