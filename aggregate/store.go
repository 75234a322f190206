package aggregate

import (
	"slices"
	"sync"
)

// PartialStore holds encoded final partials evicted from memory, keyed by
// series id and bucket. Series ids are stable for one engine lineage (a
// snapshot and the batches after it); a rebuild starts with an empty
// store. The engine calls Put and Get from Apply's goroutine and Scan from
// queries, concurrently.
type PartialStore interface {
	// Put stores data (owned by the store from then on) for a partial,
	// replacing any earlier value.
	Put(series uint32, bucket int64, data []byte) error
	// Get returns a partial's data, or ok false.
	Get(series uint32, bucket int64) (data []byte, ok bool, err error)
	// Scan calls fn for the series' partials with from <= bucket < to in
	// ascending bucket order until fn returns false. data is valid only
	// during the call.
	Scan(series uint32, from, to int64, fn func(bucket int64, data []byte) bool) error
}

// Snapshotter is implemented by stores whose content belongs in the
// engine's snapshot (MemStore); durable stores need not implement it.
type Snapshotter interface {
	// SnapshotTo appends the store's content to e, deterministically.
	SnapshotTo(e func(series uint32, bucket int64, data []byte))
	// Reset empties the store before a restore refills it with Put.
	Reset()
}

// MemStore is an in-memory PartialStore. Encoded partials are several
// times smaller than live ones, so eviction into it still saves memory; it
// is included in the engine's Snapshot.
type MemStore struct {
	mu     sync.RWMutex
	series map[uint32]*memSeries
}

type memSeries struct {
	buckets []int64 // ascending
	data    [][]byte
}

// NewMemStore returns an empty MemStore.
func NewMemStore() *MemStore { return &MemStore{series: map[uint32]*memSeries{}} }

// Put implements PartialStore.
func (m *MemStore) Put(series uint32, bucket int64, data []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.series[series]
	if s == nil {
		s = &memSeries{}
		m.series[series] = s
	}
	i, found := slices.BinarySearch(s.buckets, bucket)
	if found {
		s.data[i] = data
		return nil
	}
	s.buckets = slices.Insert(s.buckets, i, bucket)
	s.data = slices.Insert(s.data, i, data)
	return nil
}

// Get implements PartialStore.
func (m *MemStore) Get(series uint32, bucket int64) ([]byte, bool, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	s := m.series[series]
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
func (m *MemStore) Scan(series uint32, from, to int64, fn func(int64, []byte) bool) error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	s := m.series[series]
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

// Len returns the number of partials held.
func (m *MemStore) Len() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	n := 0
	for _, s := range m.series {
		n += len(s.buckets)
	}
	return n
}

// SnapshotTo implements Snapshotter, in series then bucket order.
func (m *MemStore) SnapshotTo(fn func(uint32, int64, []byte)) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	ids := make([]uint32, 0, len(m.series))
	for id := range m.series {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		s := m.series[id]
		for i, b := range s.buckets {
			fn(id, b, s.data[i])
		}
	}
}

// Reset implements Snapshotter.
func (m *MemStore) Reset() {
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(m.series)
}
