package hub

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"edgeflow/hub/ranges"
	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// The event-time index lets GET /v1/events find a device's batch entries
// by the corrected times of their events, whatever their arrival: a device
// back from a day offline uploads events of yesterday today, and a query
// for yesterday finds them. Every batch entry gets at most four keys
//
//	t<device>\x00<level:1><bucketStart:8><position:8><serverTimeNs:8>
//
// written in the same transaction as the entry itself, so the two are
// never apart after a crash. position and serverTimeNs are the entry's
// log key. The level is the smallest of minute, hour and day whose
// buckets holding the entry's events number at most four (a key per
// bucket, no value). An entry whose events spread over more than four
// days (a device offline for weeks that reports once an hour, say) gets
// one key at the catch-all level instead: bucketStart is its earliest
// event time and the value its latest (8 bytes). A query for [from, to)
// reads, for each level, the keys of the buckets that overlap it, and the
// catch-all keys that start before to (keys only, cheap), keeping those
// whose span overlaps it; then it reads the entries they name, in log
// order.
//
// The buckets are those of the events the entry applies (fresh, not
// refused) at the time correctTime gives them, the time the query
// filters by. A decode worker computes them for the whole batch; the
// committer recomputes them only when the entry applies part of it or an
// UNTRUSTED event takes the hub's estimate (eventIndexKVs). Retention and
// the one-time build compute them from the stored entry, the same way.
//
// keyEventIndex marks a store whose index covers the whole log. A store
// without it (written before the index existed) gets its index built
// once from its log when the hub opens it; the per-device arrival index
// that came before (keys e<device>\x00<serverTimeNs:8><position:8> and
// its marker s) is deleted then.
const (
	prefixEventIndex = 't'
	keyEventIndex    = "i"
	prefixArrivalOld = 'e' // the arrival index the event-time index replaced
	keyArrivalOld    = "s"
)

// Index levels: buckets of a minute, an hour and a day, and the catch-all.
const (
	levelAll       = 3
	maxIndexKeys   = 4 // keys per entry, and buckets per level at most
	eventKeyFixLen = 1 + 8 + 8 + 8
)

// levelSize is the bucket size of each level but the catch-all, in ns.
var levelSize = [levelAll]int64{int64(time.Minute), int64(time.Hour), int64(24 * time.Hour)}

// errIndexScanCap is returned by eventEntries when more entries than its
// cap would be read.
var errIndexScanCap = errors.New("hub: event index: too many log entries")

// eventIndexPrefix is the prefix of all of device's index keys, with room
// for the rest of a key.
func eventIndexPrefix(device string) []byte {
	k := make([]byte, 0, 2+len(device)+eventKeyFixLen)
	k = append(k, prefixEventIndex)
	k = append(k, device...)
	return append(k, 0)
}

// sortableNs encodes a signed time so that byte order is time order.
func sortableNs(ns int64) uint64 { return uint64(ns) ^ 1<<63 }

// appendEventIndexKey appends to prefix (from eventIndexPrefix) the rest
// of the key of the entry at position seq for one bucket.
func appendEventIndexKey(prefix []byte, level byte, bucket int64, seq uint64, serverTimeNs int64) []byte {
	k := append(prefix, level)
	k = binary.BigEndian.AppendUint64(k, sortableNs(bucket))
	k = binary.BigEndian.AppendUint64(k, seq)
	return binary.BigEndian.AppendUint64(k, uint64(serverTimeNs))
}

// eventIndexKey is one parsed index key.
type eventIndexKey struct {
	device       string
	level        byte
	bucket       int64
	seq          uint64
	serverTimeNs int64
}

// parseEventIndexKey splits an index key. Device ids never hold a 0 byte,
// so the byte before the fixed part ends the device.
func parseEventIndexKey(k []byte) (eventIndexKey, error) {
	n := len(k) - eventKeyFixLen
	if n < 3 || k[0] != prefixEventIndex || k[n-1] != 0 || k[n] > levelAll {
		return eventIndexKey{}, fmt.Errorf("%w: event index key %x", ErrCorrupt, k)
	}
	return eventIndexKey{
		device: string(k[1 : n-1]), level: k[n],
		bucket:       int64(binary.BigEndian.Uint64(k[n+1:]) ^ 1<<63),
		seq:          binary.BigEndian.Uint64(k[n+9:]),
		serverTimeNs: int64(binary.BigEndian.Uint64(k[n+17:])),
	}, nil
}

// bucketOf is the start of the bucket of size holding ns.
func bucketOf(ns, size int64) int64 {
	b := ns / size
	if ns%size < 0 {
		b--
	}
	return b * size
}

// bucketSet collects the distinct buckets of an entry's event times at
// each level, up to maxIndexKeys each, and their span.
type bucketSet struct {
	n          [levelAll]int // maxIndexKeys+1 once a level has too many
	b          [levelAll][maxIndexKeys]int64
	some       bool
	minNs, max int64
	minute     int64 // the previous event's minute bucket
	// untrusted: some event is UNTRUSTED, so its time depends on the
	// hub's estimate (correctTime).
	untrusted bool
	// done: a decode worker filled the set for the whole batch.
	done bool
}

// add records one event time.
func (s *bucketSet) add(ns int64) {
	if !s.some {
		s.some, s.minNs, s.max = true, ns, ns
	} else if s.minNs, s.max = min(s.minNs, ns), max(s.max, ns); ns >= s.minute && ns-s.minute < levelSize[0] {
		return // the previous event's buckets, at every level
	}
	s.minute = bucketOf(ns, levelSize[0])
	for l := range levelAll {
		if s.n[l] > maxIndexKeys {
			continue
		}
		b := bucketOf(ns, levelSize[l])
		if slices.Contains(s.b[l][:s.n[l]], b) {
			return // the same bucket at this level is the same at the higher ones
		}
		if s.n[l] == maxIndexKeys {
			s.n[l]++
			continue
		}
		s.b[l][s.n[l]] = b
		s.n[l]++
	}
}

// choose returns the level to index at and its buckets (none when no
// event was added); at the catch-all level, the one bucket starts at the
// earliest event time and lastNs is the latest.
func (s *bucketSet) choose() (level byte, buckets []int64, lastNs int64) {
	if !s.some {
		return 0, nil, 0
	}
	for l := range levelAll {
		if s.n[l] <= maxIndexKeys {
			return byte(l), s.b[l][:s.n[l]], 0
		}
	}
	return levelAll, []int64{s.minNs}, s.max
}

// addEvents adds to s the corrected times (with est) of v's events in
// fresh that refused does not hold: the events the applier applies, at
// the time correctTime gives them (as applier.event does). It reads a
// columnar batch's columns without building its events.
func (s *bucketSet) addEvents(v *batchView, fresh []ranges.SeqRange, refused []refusedRange, est hubEstimate) {
	if ceilingNoDecode {
		return
	}
	n := uint64(v.len())
	c, evs := &v.cols, v.events
	if v.columnar && (len(c.Time) < int(n) || len(c.Offset) < int(n) || len(c.Uncertainty) < int(n) || len(c.Method) < int(n)) ||
		!v.columnar && len(evs) < int(n) {
		return // not a parsed batch
	}
	var e AppliedEvent // reused: correctTime reads and sets only its time fields
	var off int64
	for _, r := range fresh {
		if r.First < v.firstSeq || r.Last < r.First {
			continue
		}
		lo, hi := r.First-v.firstSeq, min(r.Last-v.firstSeq, n-1)
		for i := lo; i <= hi && i < n; i++ {
			if len(refused) > 0 && (&walEntry{refused: refused}).refusedAt(v.firstSeq+i) {
				continue
			}
			if v.columnar {
				e.DeviceTimeNs, off, e.UncertaintyNs, e.Method = c.Time[i], c.Offset[i], c.Uncertainty[i], wirepb.TimeMethod(int32(c.Method[i]))
			} else {
				ev := &evs[i]
				e.DeviceTimeNs, off, e.UncertaintyNs, e.Method = ev.deviceTimeNs, ev.offsetNs, ev.uncertaintyNs, ev.method
			}
			e.EventTimeNs = e.DeviceTimeNs
			s.untrusted = s.untrusted || e.Method == wirepb.TimeMethod_TIME_METHOD_UNTRUSTED
			correctTime(&e, off, est)
			if t := e.EventTimeNs; s.some && t >= s.minute && t-s.minute < levelSize[0] {
				s.minNs, s.max = min(s.minNs, t), max(s.max, t) // the previous event's minute
				continue
			}
			s.add(e.EventTimeNs)
		}
	}
}

// prepareEventIndex fills p's bucket set from its valid batch, for the
// whole batch and without the hub's estimate: a decode worker does the
// per-event work, and the committer uses the set as it is when the entry
// applies the whole batch and no event's time depends on the estimate
// (eventIndexKVs).
func (p *pending) prepareEventIndex(v *batchView) {
	if p.last < p.first || p.first == 0 {
		return
	}
	whole := []ranges.SeqRange{{First: p.first, Last: p.last}}
	p.times.addEvents(v, whole, freshRefused(v, whole), hubEstimate{})
	p.times.done = true
}

// eventIndexKVs appends the index keys and values of batch entry e parsed
// as v to out, from pre when a decode worker prepared it and it holds for
// e (else nil), else from v.
func eventIndexKVs(out []kv, e *walEntry, v *batchView, pre *bucketSet) []kv {
	var s bucketSet
	if pre != nil && pre.done && !(pre.untrusted && e.est.ok) && len(e.fresh) == 1 &&
		e.fresh[0].First == v.firstSeq && e.fresh[0].Last == v.firstSeq+uint64(v.len())-1 {
		s = *pre
	} else {
		s.addEvents(v, e.fresh, e.refused, e.est)
	}
	level, buckets, lastNs := s.choose()
	if len(buckets) == 0 {
		return out
	}
	n := 2 + len(e.device) + eventKeyFixLen
	buf := make([]byte, 0, n*len(buckets)+8)
	for _, b := range buckets {
		buf = append(buf, prefixEventIndex)
		buf = append(buf, e.device...)
		buf = appendEventIndexKey(append(buf, 0), level, b, e.seq, e.serverTimeNs)
		out = append(out, kv{k: buf[len(buf)-n : len(buf) : len(buf)]})
	}
	if level == levelAll {
		buf = binary.BigEndian.AppendUint64(buf, sortableNs(lastNs))
		out[len(out)-1].v = buf[len(buf)-8:]
	}
	return out
}

// storedIndexKVs returns the index keys and values of a stored log entry
// (none for ticks and status entries).
func storedIndexKVs(e *walEntry, lim wire.Limits) ([]kv, error) {
	if e.kind != entryBatch {
		return nil, nil
	}
	v := new(batchView)
	if err := parseBatchFrame(v, e.payload, lim); err != nil {
		return nil, fmt.Errorf("%w: log entry %d: batch: %v", ErrCorrupt, e.seq, err)
	}
	return eventIndexKVs(nil, e, v, nil), nil
}

// indexPosition names a log entry an index key points to.
type indexPosition struct {
	seq          uint64
	serverTimeNs int64
}

// eventEntries calls fn, in log order, with each of device's batch
// entries that may hold events with a corrected time in [fromNs, toNs)
// and that arrived before arrivedBeforeNs. Past maxEntries entries it
// returns errIndexScanCap without calling fn.
func (s *store) eventEntries(device string, fromNs, toNs, arrivedBeforeNs int64, maxEntries int, fn func(*walEntry) error) error {
	return s.db.View(func(txn *badger.Txn) error {
		pos, err := eventPositions(txn, device, fromNs, toNs, arrivedBeforeNs, maxEntries)
		if err != nil {
			return err
		}
		for _, p := range pos {
			e, ok, err := readEntry(txn, p.seq, p.serverTimeNs)
			if err != nil {
				return err
			}
			if ok {
				if err := fn(e); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// eventPositions reads the index keys of device for [fromNs, toNs) and
// returns the distinct entries they name, in log order.
func eventPositions(txn *badger.Txn, device string, fromNs, toNs, arrivedBeforeNs int64, maxEntries int) ([]indexPosition, error) {
	if toNs <= fromNs {
		return nil, nil
	}
	prefix := eventIndexPrefix(device)
	it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
	defer it.Close()
	var pos []indexPosition
	maxKeys := maxIndexKeys * maxEntries
	for l := byte(0); l <= levelAll; l++ {
		lo, hi := int64(math.MinInt64), toNs-1 // the catch-all: spans starting before to
		if l < levelAll {
			lo, hi = bucketOf(fromNs, levelSize[l]), bucketOf(toNs-1, levelSize[l])
		}
		seek := binary.BigEndian.AppendUint64(append(bytes.Clone(prefix), l), sortableNs(lo))
		for it.Seek(seek); it.Valid(); it.Next() {
			k, err := parseEventIndexKey(it.Item().Key())
			if err != nil {
				return nil, err
			}
			if k.level != l || k.bucket > hi {
				break
			}
			if k.serverTimeNs >= arrivedBeforeNs {
				continue
			}
			if l == levelAll {
				if last, err := catchAllLast(it.Item()); err != nil || last < fromNs {
					if err != nil {
						return nil, err
					}
					continue
				}
			}
			if pos = append(pos, indexPosition{k.seq, k.serverTimeNs}); len(pos) > maxKeys {
				return nil, errIndexScanCap
			}
		}
	}
	slices.SortFunc(pos, func(a, b indexPosition) int { return cmp.Compare(a.seq, b.seq) })
	pos = slices.Compact(pos)
	if len(pos) > maxEntries {
		return nil, errIndexScanCap
	}
	return pos, nil
}

// catchAllLast reads the latest event time of a catch-all index key.
func catchAllLast(item *badger.Item) (int64, error) {
	var last int64
	err := item.Value(func(v []byte) error {
		if len(v) != 8 {
			return fmt.Errorf("%w: event index key %x: value %x, want 8 bytes", ErrCorrupt, item.Key(), v)
		}
		last = int64(binary.BigEndian.Uint64(v) ^ 1<<63)
		return nil
	})
	return last, err
}

// readEntry reads the log entry at position seq with server time
// serverTimeNs; ok is false if it is gone (retention deletes an entry's
// index keys with it; a crash between the two may leave keys behind).
func readEntry(txn *badger.Txn, seq uint64, serverTimeNs int64) (e *walEntry, ok bool, err error) {
	item, err := txn.Get(walKey(seq, serverTimeNs))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	e, err = walItemEntry(item, seq)
	return e, err == nil, err
}

// indexKeysOfLog returns the index keys of the log entries with the given
// log keys (Retain deletes them with the entries), reading and parsing
// each entry: about what replaying them costs. An entry that cannot
// be read or parsed has no keys it can name; its keys, if any, stay, and
// readers skip them once the entry is gone.
func (s *store) indexKeysOfLog(walKeys [][]byte, lim wire.Limits) ([][]byte, error) {
	var out [][]byte
	err := s.db.View(func(txn *badger.Txn) error {
		for _, wk := range walKeys {
			seq, t, err := parseWALKey(wk)
			if err != nil {
				return err
			}
			e, ok, err := readEntry(txn, seq, t)
			if err != nil || !ok {
				continue
			}
			kvs, err := storedIndexKVs(e, lim)
			for _, x := range kvs {
				out = append(out, x.k)
			}
		}
		return nil
	})
	return out, err
}

// ensureEventIndex builds the event-time index from the whole log once,
// for a store written before it existed (see keyEventIndex), deleting the
// arrival index it replaces. Entries it cannot read are left to recovery,
// which reports them.
func (s *store) ensureEventIndex(lim wire.Limits, log *slog.Logger) error {
	done := false
	err := s.db.View(func(txn *badger.Txn) error {
		_, err := txn.Get([]byte(keyEventIndex))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		done = err == nil
		return err
	})
	if err != nil || done {
		return err
	}
	start := time.Now()
	if err := s.db.DropPrefix([]byte{prefixArrivalOld}); err != nil {
		return fmt.Errorf("delete the old arrival index: %w", err)
	}
	wb := s.db.NewWriteBatch()
	defer wb.Cancel()
	entries, keys, skipped := 0, 0, 0
	err = s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixWAL}, PrefetchValues: true, PrefetchSize: 16})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			seq, _, err := parseWALKey(it.Item().Key())
			if err != nil {
				return err
			}
			entries++
			e, err := walItemEntry(it.Item(), seq)
			var kvs []kv
			if err == nil {
				kvs, err = storedIndexKVs(e, lim)
			}
			if err != nil {
				skipped++
				continue
			}
			for _, x := range kvs {
				if err := wb.Set(x.k, x.v); err != nil {
					return err
				}
			}
			keys += len(kvs)
		}
		return nil
	})
	if err == nil {
		err = wb.Delete([]byte(keyArrivalOld))
	}
	if err == nil {
		err = wb.Set([]byte(keyEventIndex), nil)
	}
	if err == nil {
		err = wb.Flush()
	}
	if err == nil {
		err = s.db.Sync()
	}
	if err != nil {
		return fmt.Errorf("build the event-time index: %w", err)
	}
	log.Info("event-time index built from the log", "entries", entries, "keys", keys, "unreadable_entries", skipped, "took", time.Since(start).Round(time.Millisecond))
	return nil
}
