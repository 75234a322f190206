package eventtime

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

	"edgeflow/hub/batchview"
	"edgeflow/hub/hublog"
	"edgeflow/hub/ranges"
	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// levelAll is the catch-all level; 0, 1 and 2 are buckets of a minute,
// an hour and a day.
const levelAll = hublog.EventIndexLevelAll

// MaxKeys bounds the index keys of one entry (and the buckets of a level
// it is indexed at), so the committer can size what it writes per batch.
const MaxKeys = 4

// levelSize is the bucket size of each level but the catch-all, in ns.
var levelSize = [levelAll]int64{int64(time.Minute), int64(time.Hour), int64(24 * time.Hour)}

// ErrScanCap is returned by Entries when more entries than its cap would
// be read, so the caller can ask for a narrower range.
var ErrScanCap = errors.New("hub: event index: too many log entries")

// bucketOf is the start of the bucket of size holding ns.
func bucketOf(ns, size int64) int64 {
	b := ns / size
	if ns%size < 0 {
		b--
	}
	return b * size
}

// Buckets collects the distinct buckets of an entry's event times at
// each level, up to MaxKeys each, and their span. A decode worker fills
// it (Prepare) so the committer, which every batch goes through, only
// writes the keys (AppendKVs). The zero value is empty.
type Buckets struct {
	n          [levelAll]int // MaxKeys+1 once a level has too many
	b          [levelAll][MaxKeys]int64
	some       bool
	minNs, max int64
	minute     int64 // the previous event's minute bucket
	// untrusted: some event is UNTRUSTED, so its time depends on the
	// hub's estimate (Correct).
	untrusted bool
	// done: a decode worker filled the set for the whole batch.
	done bool
}

// add records one event time.
func (s *Buckets) add(ns int64) {
	if !s.some {
		s.some, s.minNs, s.max = true, ns, ns
	} else if s.minNs, s.max = min(s.minNs, ns), max(s.max, ns); ns >= s.minute && ns-s.minute < levelSize[0] {
		return // the previous event's buckets, at every level
	}
	s.minute = bucketOf(ns, levelSize[0])
	for l := range levelAll {
		if s.n[l] > MaxKeys {
			continue
		}
		b := bucketOf(ns, levelSize[l])
		if slices.Contains(s.b[l][:s.n[l]], b) {
			return // the same bucket at this level is the same at the higher ones
		}
		if s.n[l] == MaxKeys {
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
func (s *Buckets) choose() (level byte, buckets []int64, lastNs int64) {
	if !s.some {
		return 0, nil, 0
	}
	for l := range levelAll {
		if s.n[l] <= MaxKeys {
			return byte(l), s.b[l][:s.n[l]], 0
		}
	}
	return levelAll, []int64{s.minNs}, s.max
}

// addEvents adds to s the corrected times (with est) of v's events in
// fresh that refused does not hold: the events the hub's applier applies,
// at the time Correct gives them. It reads a
// columnar batch's columns without building its events.
func (s *Buckets) addEvents(v *batchview.View, fresh []ranges.SeqRange, refused []hublog.RefusedRange, est hublog.HubEstimate) {
	n := uint64(v.Len())
	c, evs := v.Columns(), v.Events
	if c != nil && (len(c.Time) < int(n) || len(c.Offset) < int(n) || len(c.Uncertainty) < int(n) || len(c.Method) < int(n)) ||
		c == nil && len(evs) < int(n) {
		return // not a parsed batch
	}
	var dev, off, unc int64
	var m wirepb.TimeMethod
	for _, r := range fresh {
		if r.First < v.FirstSeq || r.Last < r.First {
			continue
		}
		lo, hi := r.First-v.FirstSeq, min(r.Last-v.FirstSeq, n-1)
		for i := lo; i <= hi && i < n; i++ {
			if len(refused) > 0 && (&hublog.Entry{Refused: refused}).RefusedAt(v.FirstSeq+i) {
				continue
			}
			if c != nil {
				dev, off, unc, m = c.Time[i], c.Offset[i], c.Uncertainty[i], wirepb.TimeMethod(int32(c.Method[i]))
			} else {
				ev := &evs[i]
				dev, off, unc, m = ev.DeviceTimeNs, ev.OffsetNs, ev.UncertaintyNs, ev.Method
			}
			s.untrusted = s.untrusted || m == wirepb.TimeMethod_TIME_METHOD_UNTRUSTED
			t, _, _ := Correct(dev, off, unc, m, est)
			if s.some && t >= s.minute && t-s.minute < levelSize[0] {
				s.minNs, s.max = min(s.minNs, t), max(s.max, t) // the previous event's minute
				continue
			}
			s.add(t)
		}
	}
}

// Prepare fills s from a valid batch v of the sequence numbers
// [first, last], for the whole batch and without the hub's estimate: a
// decode worker does the per-event work, and the committer uses the set
// as it is when the entry applies the whole batch and no event's time
// depends on the estimate (AppendKVs).
func (s *Buckets) Prepare(v *batchview.View, first, last uint64) {
	if last < first || first == 0 {
		return
	}
	whole := []ranges.SeqRange{{First: first, Last: last}}
	s.addEvents(v, whole, FreshRefused(v, whole), hublog.HubEstimate{})
	s.done = true
}

// KV is one index key and its value (nil but at the catch-all level),
// to be written with the log entry it names.
type KV struct {
	Key, Value []byte
}

// AppendKVs appends the index keys and values of batch entry e parsed
// as v to out, from pre when a decode worker prepared it and it holds for
// e (else nil), else from v.
func AppendKVs(out []KV, e *hublog.Entry, v *batchview.View, pre *Buckets) []KV {
	var s Buckets
	if pre != nil && pre.done && !(pre.untrusted && e.Est.OK) && len(e.Fresh) == 1 &&
		e.Fresh[0].First == v.FirstSeq && e.Fresh[0].Last == v.FirstSeq+uint64(v.Len())-1 {
		s = *pre
	} else {
		s.addEvents(v, e.Fresh, e.Refused, e.Est)
	}
	level, buckets, lastNs := s.choose()
	if len(buckets) == 0 {
		return out
	}
	n := 2 + len(e.Device) + hublog.EventKeyFixLen
	buf := make([]byte, 0, n*len(buckets)+8)
	for _, b := range buckets {
		buf = append(buf, hublog.PrefixEventIndex)
		buf = append(buf, e.Device...)
		buf = hublog.AppendEventIndexKey(append(buf, 0), level, b, e.Seq, e.ServerTimeNs)
		out = append(out, KV{Key: buf[len(buf)-n : len(buf) : len(buf)]})
	}
	if level == levelAll {
		buf = binary.BigEndian.AppendUint64(buf, hublog.SortableNs(lastNs))
		out[len(out)-1].Value = buf[len(buf)-8:]
	}
	return out
}

// storedIndexKVs returns the index keys and values of a stored log entry
// (none for ticks and status entries).
func storedIndexKVs(e *hublog.Entry, lim wire.Limits) ([]KV, error) {
	if e.Kind != hublog.KindBatch {
		return nil, nil
	}
	v := new(batchview.View)
	if err := batchview.ParseBatchFrame(v, e.Payload, lim); err != nil {
		return nil, fmt.Errorf("%w: log entry %d: batch: %v", hublog.ErrCorrupt, e.Seq, err)
	}
	return AppendKVs(nil, e, v, nil), nil
}

// indexPosition names a log entry an index key points to.
type indexPosition struct {
	seq          uint64
	serverTimeNs int64
}

// Entries calls fn, in log order, with each of device's batch
// entries that may hold events with a corrected time in [fromNs, toNs)
// and that arrived before arrivedBeforeNs. Past maxEntries entries it
// returns ErrScanCap without calling fn.
func Entries(st *hublog.Store, device string, fromNs, toNs, arrivedBeforeNs int64, maxEntries int, fn func(*hublog.Entry) error) error {
	return st.DB.View(func(txn *badger.Txn) error {
		pos, err := eventPositions(txn, device, fromNs, toNs, arrivedBeforeNs, maxEntries)
		if err != nil {
			return err
		}
		for _, p := range pos {
			e, ok, err := hublog.ReadEntry(txn, p.seq, p.serverTimeNs)
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
	prefix := hublog.EventIndexPrefix(device)
	it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
	defer it.Close()
	var pos []indexPosition
	maxKeys := MaxKeys * maxEntries
	for l := byte(0); l <= levelAll; l++ {
		lo, hi := int64(math.MinInt64), toNs-1 // the catch-all: spans starting before to
		if l < levelAll {
			lo, hi = bucketOf(fromNs, levelSize[l]), bucketOf(toNs-1, levelSize[l])
		}
		seek := binary.BigEndian.AppendUint64(append(bytes.Clone(prefix), l), hublog.SortableNs(lo))
		for it.Seek(seek); it.Valid(); it.Next() {
			k, err := hublog.ParseEventIndexKey(it.Item().Key())
			if err != nil {
				return nil, err
			}
			if k.Level != l || k.Bucket > hi {
				break
			}
			if k.ServerTimeNs >= arrivedBeforeNs {
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
			if pos = append(pos, indexPosition{k.Seq, k.ServerTimeNs}); len(pos) > maxKeys {
				return nil, ErrScanCap
			}
		}
	}
	slices.SortFunc(pos, func(a, b indexPosition) int { return cmp.Compare(a.seq, b.seq) })
	pos = slices.Compact(pos)
	if len(pos) > maxEntries {
		return nil, ErrScanCap
	}
	return pos, nil
}

// catchAllLast reads the latest event time of a catch-all index key.
func catchAllLast(item *badger.Item) (int64, error) {
	var last int64
	err := item.Value(func(v []byte) error {
		if len(v) != 8 {
			return fmt.Errorf("%w: event index key %x: value %x, want 8 bytes", hublog.ErrCorrupt, item.Key(), v)
		}
		last = hublog.UnsortableNs(binary.BigEndian.Uint64(v))
		return nil
	})
	return last, err
}

// KeysOfLog returns the index keys of the log entries with the given
// log keys (Retain deletes them with the entries), reading and parsing
// each entry: about what replaying them costs. An entry that cannot
// be read or parsed has no keys it can name; its keys, if any, stay, and
// readers skip them once the entry is gone.
func KeysOfLog(st *hublog.Store, walKeys [][]byte, lim wire.Limits) ([][]byte, error) {
	var out [][]byte
	err := st.DB.View(func(txn *badger.Txn) error {
		for _, wk := range walKeys {
			seq, t, err := hublog.ParseWALKey(wk)
			if err != nil {
				return err
			}
			e, ok, err := hublog.ReadEntry(txn, seq, t)
			if err != nil || !ok {
				continue
			}
			kvs, err := storedIndexKVs(e, lim)
			if err != nil {
				continue // unparsable: no keys it can name (see above)
			}
			for _, x := range kvs {
				out = append(out, x.Key)
			}
		}
		return nil
	})
	return out, err
}

// EnsureIndex builds the event-time index from the whole log once,
// for a store written before it existed (see hublog.KeyEventIndex), deleting the
// arrival index it replaces. Entries it cannot read are left to recovery,
// which reports them.
func EnsureIndex(st *hublog.Store, lim wire.Limits, log *slog.Logger) error {
	done := false
	err := st.DB.View(func(txn *badger.Txn) error {
		_, err := txn.Get([]byte(hublog.KeyEventIndex))
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
	if err := st.DB.DropPrefix([]byte{hublog.PrefixArrivalOld}); err != nil {
		return fmt.Errorf("delete the old arrival index: %w", err)
	}
	wb := st.DB.NewWriteBatch()
	defer wb.Cancel()
	entries, keys, skipped := 0, 0, 0
	err = st.DB.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{hublog.PrefixWAL}, PrefetchValues: true, PrefetchSize: 16})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			seq, _, err := hublog.ParseWALKey(it.Item().Key())
			if err != nil {
				return err
			}
			entries++
			e, err := hublog.WALItemEntry(it.Item(), seq)
			var kvs []KV
			if err == nil {
				kvs, err = storedIndexKVs(e, lim)
			}
			if err != nil {
				skipped++
				continue
			}
			for _, x := range kvs {
				if err := wb.Set(x.Key, x.Value); err != nil {
					return err
				}
			}
			keys += len(kvs)
		}
		return nil
	})
	if err == nil {
		err = wb.Delete([]byte(hublog.KeyArrivalOld))
	}
	if err == nil {
		err = wb.Set([]byte(hublog.KeyEventIndex), nil)
	}
	if err == nil {
		err = wb.Flush()
	}
	if err == nil {
		err = st.DB.Sync()
	}
	if err != nil {
		return fmt.Errorf("build the event-time index: %w", err)
	}
	log.Info("event-time index built from the log", "entries", entries, "keys", keys, "unreadable_entries", skipped, "took", time.Since(start).Round(time.Millisecond))
	return nil
}
