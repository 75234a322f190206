package aggregate

import (
	"hash/maphash"
	"slices"
	"strings"
)

// series is one (metric, device, tag set) and its live partials.
type series struct {
	hash   uint64
	next   uint32 // next series with the same hash, plus one; 0 ends the chain
	metric uint32 // index into seriesTable.metrics
	name   string // metric name
	device string
	tags   []Tag     // kept tags sorted by key
	parts  []partial // live partials, ascending by bucket
	// storedMax is the highest bucket ever evicted to the store; stored
	// tells whether there is one.
	storedMax int64
	stored    bool
	// dead: the series' device was dropped (DropDevices). The slot keeps
	// its identity for the released events of the merged stream that name
	// it, holds no partial, and is out of the index and its metric's list.
	dead bool
}

// metricInfo lists the series of one metric, in creation order.
type metricInfo struct {
	name   string
	series []uint32
}

// seriesTable interns series identities. Hashes are seeded per process and
// never persisted; ids are assigned in first-seen order, so replaying the
// same batches gives the same ids.
type seriesTable struct {
	list      []series
	index     map[uint64]uint32
	metricIdx map[string]uint32
	metrics   []metricInfo
	seed      maphash.Seed
	tagKeys   []string // sorted; empty keeps all tags
	maxSeries int
	maxTags   int
	scratch   []Tag
	// perDevice counts each device's series, for maxPerDevice.
	perDevice    map[string]int
	maxPerDevice int
	// dead counts the dead series in list (they count against no cap).
	dead int
}

func newSeriesTable(tagKeys []string, maxSeries, maxPerDevice, maxTags int) *seriesTable {
	keys := slices.Clone(tagKeys)
	slices.Sort(keys)
	return &seriesTable{
		index: map[uint64]uint32{}, metricIdx: map[string]uint32{},
		seed: maphash.MakeSeed(), tagKeys: slices.Compact(keys),
		maxSeries: maxSeries, maxTags: maxTags,
		perDevice: map[string]int{}, maxPerDevice: maxPerDevice,
	}
}

// full reports whether the table refuses new series of device, and which
// cap refuses them (max_series or max_series_per_device).
func (t *seriesTable) full(device string) (string, bool) {
	switch {
	case len(t.list)-t.dead >= t.maxSeries:
		return "max_series", true
	case t.perDevice[device] >= t.maxPerDevice:
		return "max_series_per_device", true
	}
	return "", false
}

// keep reports whether a tag key identifies series.
func (t *seriesTable) keep(key string) bool {
	if len(t.tagKeys) == 0 {
		return true
	}
	for _, k := range t.tagKeys {
		if k == key {
			return true
		}
	}
	return false
}

// canonical returns the kept tags of tags sorted by (key, value), one per
// key, at most maxTags, in a scratch slice valid until the next call.
func (t *seriesTable) canonical(tags []Tag) []Tag {
	s := t.scratch[:0]
	for _, tg := range tags {
		if t.keep(tg.Key) {
			s = append(s, tg)
		}
	}
	for i := 1; i < len(s); i++ { // insertion sort: tag sets are small
		for j := i; j > 0 && tagLess(s[j], s[j-1]); j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	s = slices.CompactFunc(s, func(a, b Tag) bool { return a.Key == b.Key })
	if len(s) > t.maxTags {
		s = s[:t.maxTags]
	}
	t.scratch = s
	return s
}

func tagLess(a, b Tag) bool {
	if a.Key != b.Key {
		return a.Key < b.Key
	}
	return a.Value < b.Value
}

func (t *seriesTable) hash(devHash uint64, metric string, tags []Tag) uint64 {
	h := devHash ^ maphash.String(t.seed, metric)*0x9e3779b97f4a7c15
	for _, tg := range tags {
		h = (h ^ maphash.String(t.seed, tg.Key)) * 0xff51afd7ed558ccd
		h = (h ^ maphash.String(t.seed, tg.Value)) * 0xc4ceb9fe1a85ec53
	}
	return h
}

func (t *seriesTable) deviceHash(device string) uint64 { return maphash.String(t.seed, device) }

// lookup returns the id of the series, creating it; ok is false when the
// series is new and the table (or the device's share of it) is full.
func (t *seriesTable) lookup(devHash uint64, device, metric string, rawTags []Tag) (id uint32, ok bool) {
	tags := t.canonical(rawTags)
	h := t.hash(devHash, metric, tags)
	if first, found := t.index[h]; found {
		for id := first; ; {
			s := &t.list[id]
			if s.device == device && s.name == metric && slices.Equal(s.tags, tags) {
				return id, true
			}
			if s.next == 0 {
				break
			}
			id = s.next - 1
		}
	}
	if _, full := t.full(device); full {
		return 0, false
	}
	return t.add(h, device, metric, slices.Clone(tags)), true
}

// add appends a series with a precomputed hash and links it in the index.
func (t *seriesTable) add(h uint64, device, metric string, tags []Tag) uint32 {
	id := uint32(len(t.list))
	m, found := t.metricIdx[metric]
	if !found {
		m = uint32(len(t.metrics))
		t.metricIdx[metric] = m
		t.metrics = append(t.metrics, metricInfo{name: metric})
	}
	t.metrics[m].series = append(t.metrics[m].series, id)
	t.perDevice[device]++
	s := series{hash: h, metric: m, name: metric, device: device, tags: tags}
	if first, found := t.index[h]; found {
		s.next = first + 1
	}
	t.index[h] = id
	t.list = append(t.list, s)
	return id
}

// rehash rebuilds hashes and the index after a restore (seeds differ
// between processes).
func (t *seriesTable) rehash() {
	clear(t.index)
	for id := range t.list {
		s := &t.list[id]
		s.next = 0
		if s.dead {
			continue
		}
		s.hash = t.hash(t.deviceHash(s.device), s.name, s.tags)
		if first, found := t.index[s.hash]; found {
			s.next = first + 1
		}
		t.index[s.hash] = uint32(id)
	}
}

// tagValue returns the value of key in sorted tags, or "".
func tagValue(tags []Tag, key string) string {
	i, found := slices.BinarySearchFunc(tags, key, func(t Tag, k string) int { return strings.Compare(t.Key, k) })
	if found {
		return tags[i].Value
	}
	return ""
}
