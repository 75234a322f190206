package aggregate

import (
	"container/list"
	"sync"
)

// cacheBlockBuckets is how many consecutive buckets of one series a cache
// entry holds (an hour at the default 10 s resolution).
const cacheBlockBuckets = 360

// blockKey names one cache entry: a series and a block of buckets.
type blockKey struct {
	series uint32
	block  int64 // bucket / cacheBlockBuckets
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
// re-evicts them; the engine invalidates the block on every Put.
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

// invalidate drops the block holding a bucket of a series.
func (c *partCache) invalidate(series uint32, bucket int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.removeLocked(blockKey{series, floorDiv(bucket, cacheBlockBuckets)})
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
