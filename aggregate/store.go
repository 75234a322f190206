package aggregate

import (
	"slices"
	"sync"
)

// PartialStore holds encoded final partials evicted from memory, keyed by
// tier, series id and bucket. Tier 0 holds partials at the base
// resolution; tier i (1 <= i <= len(Options.Downsample)) holds partials
// merged to Options.Downsample[i-1].Resolution, keyed by the base bucket
// their span starts at. Series ids are stable for one engine lineage (a
// snapshot and the batches after it); a rebuild starts with an empty
// store. The engine calls Put, Get, Replace and DeleteRange from Apply's
// and Tick's goroutine and Scan from queries, concurrently.
type PartialStore interface {
	// Put stores data (owned by the store from then on) for a partial,
	// replacing any earlier value.
	Put(tier uint8, series uint32, bucket int64, data []byte) error
	// Get returns a partial's data, or ok false.
	Get(tier uint8, series uint32, bucket int64) (data []byte, ok bool, err error)
	// Scan calls fn for the series' partials of tier with from <= bucket
	// < to in ascending bucket order until fn returns false. data is valid
	// only during the call.
	Scan(tier uint8, series uint32, from, to int64, fn func(bucket int64, data []byte) bool) error
	// Replace deletes the series' partials of tier from with lo <= bucket
	// < hi and stores puts in tier to, atomically: after a crash either
	// both happened or neither did, so downsampling never loses or double
	// counts a partial.
	Replace(series uint32, from uint8, lo, hi int64, to uint8, puts []StoredPartial) error
	// DeleteRange deletes the series' partials of tier with from <=
	// bucket < to and returns how many it deleted.
	DeleteRange(tier uint8, series uint32, from, to int64) (int, error)
}

// StoredPartial is one encoded partial of a Replace.
type StoredPartial struct {
	Bucket int64
	Data   []byte
}

// Snapshotter is implemented by stores whose content belongs in the
// engine's snapshot (MemStore); durable stores need not implement it.
type Snapshotter interface {
	// SnapshotTo appends the store's content to e, deterministically.
	SnapshotTo(e func(tier uint8, series uint32, bucket int64, data []byte))
	// Reset empties the store before a restore refills it with Put.
	Reset()
}

// MemStore is an in-memory PartialStore. Encoded partials are several
// times smaller than live ones, so eviction into it still saves memory; it
// is included in the engine's Snapshot.
type MemStore struct {
	mu     sync.RWMutex
	series map[memKey]*memSeries
}

// memKey names one series of one tier.
type memKey struct {
	tier   uint8
	series uint32
}

type memSeries struct {
	buckets []int64 // ascending
	data    [][]byte
}

// NewMemStore returns an empty MemStore.
func NewMemStore() *MemStore { return &MemStore{series: map[memKey]*memSeries{}} }

// Put implements PartialStore.
func (m *MemStore) Put(tier uint8, series uint32, bucket int64, data []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.putLocked(memKey{tier, series}, bucket, data)
	return nil
}

func (m *MemStore) putLocked(k memKey, bucket int64, data []byte) {
	s := m.series[k]
	if s == nil {
		s = &memSeries{}
		m.series[k] = s
	}
	i, found := slices.BinarySearch(s.buckets, bucket)
	if found {
		s.data[i] = data
		return
	}
	s.buckets = slices.Insert(s.buckets, i, bucket)
	s.data = slices.Insert(s.data, i, data)
}

// Get implements PartialStore.
func (m *MemStore) Get(tier uint8, series uint32, bucket int64) ([]byte, bool, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	s := m.series[memKey{tier, series}]
	if s == nil {
		return nil, false, nil
	}
	i, found := slices.BinarySearch(s.buckets, bucket)
	if !found {
		return nil, false, nil
	}
	return s.data[i], true, nil
}

// Scan implements PartialStore.
func (m *MemStore) Scan(tier uint8, series uint32, from, to int64, fn func(int64, []byte) bool) error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	s := m.series[memKey{tier, series}]
	if s == nil {
		return nil
	}
	i, _ := slices.BinarySearch(s.buckets, from)
	for ; i < len(s.buckets) && s.buckets[i] < to; i++ {
		if !fn(s.buckets[i], s.data[i]) {
			break
		}
	}
	return nil
}

// Replace implements PartialStore, under one lock.
func (m *MemStore) Replace(series uint32, from uint8, lo, hi int64, to uint8, puts []StoredPartial) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.deleteLocked(memKey{from, series}, lo, hi)
	for _, p := range puts {
		m.putLocked(memKey{to, series}, p.Bucket, p.Data)
	}
	return nil
}

// DeleteRange implements PartialStore.
func (m *MemStore) DeleteRange(tier uint8, series uint32, from, to int64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.deleteLocked(memKey{tier, series}, from, to), nil
}

func (m *MemStore) deleteLocked(k memKey, from, to int64) int {
	s := m.series[k]
	if s == nil {
		return 0
	}
	i, _ := slices.BinarySearch(s.buckets, from)
	j, _ := slices.BinarySearch(s.buckets, to)
	if i >= j {
		return 0
	}
	clear(s.data[i:j])
	s.buckets = slices.Delete(s.buckets, i, j)
	s.data = slices.Delete(s.data, i, j)
	if len(s.buckets) == 0 {
		delete(m.series, k)
	}
	return j - i
}

// Len returns the number of partials held, in every tier.
func (m *MemStore) Len() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	n := 0
	for _, s := range m.series {
		n += len(s.buckets)
	}
	return n
}

// TierLen returns the number of partials held in one tier.
func (m *MemStore) TierLen(tier uint8) int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	n := 0
	for k, s := range m.series {
		if k.tier == tier {
			n += len(s.buckets)
		}
	}
	return n
}

// SnapshotTo implements Snapshotter, in tier, series then bucket order.
func (m *MemStore) SnapshotTo(fn func(uint8, uint32, int64, []byte)) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	keys := make([]memKey, 0, len(m.series))
	for k := range m.series {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b memKey) int {
		if a.tier != b.tier {
			return int(a.tier) - int(b.tier)
		}
		if a.series < b.series {
			return -1
		}
		if a.series > b.series {
			return 1
		}
		return 0
	})
	for _, k := range keys {
		s := m.series[k]
		for i, b := range s.buckets {
			fn(k.tier, k.series, b, s.data[i])
		}
	}
}

// Reset implements Snapshotter.
func (m *MemStore) Reset() {
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(m.series)
}
