package hublog

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"edgeflow/hub/ranges"
)

// Damage to the log. A replay checks that the positions it reads follow
// each other and that every entry it reads decodes; what it cannot read
// is damage. By default the hub then stops and says which positions,
// server times and devices the damage covers. With
// Options.RecoverDamaged it starts from what is readable and records the
// loss durably under
//
//	x<recordedAtNs:8> -> damage record (JSON)
//
// in the same transaction that deletes the unreadable entries. Every
// start applies the records to the registry (the lost sequence numbers of
// each stream become a gap with reason store_damaged, which
// GET /v1/devices/{id} shows) and skips their positions in the log, so the
// loss is reported once, then stays visible.

// GapReasonStoreDamaged is the gap reason of events lost to a damaged
// store that the hub was told to recover from.
const GapReasonStoreDamaged = "store_damaged"

// DamageRecord is one recorded loss.
type DamageRecord struct {
	TimeNs int64 `json:"time_ns"`
	// Positions are the log positions lost.
	Positions ranges.RangeSet `json:"positions"`
	// FromServerNs and ToServerNs bound their server times (0: unknown).
	FromServerNs int64 `json:"from_server_ns,omitempty"`
	ToServerNs   int64 `json:"to_server_ns,omitempty"`
	// Devices had entries among them (from the event-time index).
	Devices []string `json:"devices,omitempty"`
	// Streams are the sequence numbers each stream lost, where known.
	Streams []LostStream `json:"streams,omitempty"`
	Why     string       `json:"why,omitempty"`
}

// LostStream is what one stream lost.
type LostStream struct {
	Device string          `json:"device"`
	Stream string          `json:"stream"`
	Lost   ranges.RangeSet `json:"lost"`
}

// LogDamage collects what a replay could not read.
type LogDamage struct {
	Positions    ranges.RangeSet
	fromNs, toNs int64
	Unreadable   [][]byte // keys of entries that exist but cannot be read
	why          string
}

// any reports whether damage was found.
func (d *LogDamage) Any() bool { return d.Positions.Len() > 0 }

// add records positions first..last as damaged, minus those in known.
func (d *LogDamage) add(first, last uint64, fromNs, toNs int64, why string, known *ranges.RangeSet) bool {
	added := false
	for _, r := range known.Missing(nil, first, last) {
		d.Positions.Add(r.First, r.Last)
		added = true
	}
	if !added {
		return false
	}
	for _, t := range []int64{fromNs, toNs} {
		if t != 0 && (d.fromNs == 0 || t < d.fromNs) {
			d.fromNs = t
		}
		d.toNs = max(d.toNs, t)
	}
	if d.why == "" {
		d.why = why
	}
	return true
}

// merge adds o's damage to d's.
func (d *LogDamage) Merge(o *LogDamage) {
	for _, r := range o.Positions.Ranges() {
		d.add(r.First, r.Last, o.fromNs, o.toNs, o.why, &ranges.RangeSet{})
	}
	d.Unreadable = append(d.Unreadable, o.Unreadable...)
}

// err is the error that stops the hub.
func (d *LogDamage) Err(dir string, devices []string) *LogDamageError {
	e := &LogDamageError{Dir: dir, Positions: d.Positions.Clone(), Devices: devices, Why: d.why}
	if d.fromNs != 0 {
		e.FromServerTime, e.ToServerTime = time.Unix(0, d.fromNs), time.Unix(0, d.toNs)
	}
	return e
}

// replayChecked calls fn for each log entry after position from (up to
// upTo, 0: the end), in order, and returns the damage it found instead of
// stopping at it: entries that cannot be read or decoded (fn's ErrCorrupt
// errors included) and positions missing between from+1 (or the first
// entry, when startGapOK) and the newest entry. Positions in known are
// losses already recorded, not damage. Other errors stop it.
func (s *Store) ReplayChecked(from, upTo uint64, startGapOK bool, known *ranges.RangeSet, fn func(*Entry) error) (*LogDamage, error) {
	last, lastNs, err := s.lastWALEntry()
	if err != nil {
		return nil, err
	}
	if upTo > 0 && last > upTo {
		last, lastNs = upTo, 0
	}
	d := &LogDamage{}
	next, prevNs, seen := from+1, int64(0), false
	err = s.DB.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{PrefixWAL}, PrefetchValues: true, PrefetchSize: 16})
		defer it.Close()
		for it.Seek(walSeekKey(from + 1)); it.Valid(); it.Next() {
			seq, t, err := ParseWALKey(it.Item().Key())
			if err != nil {
				return err
			}
			if upTo > 0 && seq > upTo {
				return nil
			}
			if seq > next && (seen || !startGapOK) {
				d.add(next, seq-1, prevNs, t, fmt.Sprintf("positions %d to %d are missing", next, seq-1), known)
			}
			seen, next, prevNs = true, seq+1, t
			e, err := walItemEntry(it.Item(), seq)
			if err == nil {
				err = fn(e)
			}
			if err != nil {
				if !errors.Is(err, ErrCorrupt) {
					return err
				}
				if d.add(seq, seq, t, t, err.Error(), known) {
					d.Unreadable = append(d.Unreadable, it.Item().KeyCopy(nil))
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if last >= next {
		d.add(next, last, prevNs, lastNs, fmt.Sprintf("positions %d to %d cannot be iterated", next, last), known)
	}
	return d, nil
}

// firstWALSeq returns the oldest log position (0: none).
func (s *Store) FirstWALSeq() (uint64, error) {
	var seq uint64
	err := s.DB.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{PrefixWAL}})
		defer it.Close()
		it.Rewind()
		if !it.Valid() {
			return nil
		}
		var err error
		seq, _, err = ParseWALKey(it.Item().Key())
		return err
	})
	return seq, err
}

// maxDamageDevices bounds the devices a damage report names.
const maxDamageDevices = 50

// DevicesAt returns the devices whose event-time index names an entry at
// one of positions (sorted, at most maxDamageDevices). The index has no
// keys for ticks and status entries.
func (s *Store) DevicesAt(positions *ranges.RangeSet) []string {
	seen := map[string]bool{}
	_ = s.DB.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{PrefixEventIndex}})
		defer it.Close()
		for it.Rewind(); it.Valid() && len(seen) < maxDamageDevices; it.Next() {
			k, err := ParseEventIndexKey(it.Item().Key())
			if err == nil && positions.Covers(k.Seq, k.Seq) {
				seen[k.Device] = true
			}
		}
		return nil
	})
	out := make([]string, 0, len(seen))
	for d := range seen {
		out = append(out, d)
	}
	slices.Sort(out)
	return out
}

// loadDamageRecords reads the recorded losses, oldest first.
func (s *Store) LoadDamageRecords() ([]DamageRecord, error) {
	var out []DamageRecord
	err := s.DB.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixDamage}, PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			var r DamageRecord
			err := it.Item().Value(func(v []byte) error { return json.Unmarshal(v, &r) })
			if err != nil {
				return fmt.Errorf("%w: damage record %x: %v", ErrCorrupt, it.Item().Key(), err)
			}
			out = append(out, r)
		}
		return nil
	})
	return out, err
}

// writeDamageRecord stores r and deletes the unreadable entries in one
// transaction, then syncs.
func (s *Store) WriteDamageRecord(r *DamageRecord, unreadable [][]byte) error {
	v, err := json.Marshal(r)
	if err != nil {
		return err
	}
	key := binary.BigEndian.AppendUint64([]byte{prefixDamage}, uint64(r.TimeNs))
	err = s.DB.Update(func(txn *badger.Txn) error {
		if err := txn.Set(key, v); err != nil {
			return err
		}
		for _, k := range unreadable {
			if err := txn.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("record the loss in %s: %w", s.Dir, err)
	}
	return s.DB.Sync()
}

// KnownLosses are the recorded losses by position and by stream.
type KnownLosses struct {
	Positions ranges.RangeSet
	Streams   map[string]*ranges.RangeSet // device + "/" + stream
	Events    uint64
}

// lossesOf indexes records.
func LossesOf(records []DamageRecord) *KnownLosses {
	k := &KnownLosses{Streams: map[string]*ranges.RangeSet{}}
	for _, r := range records {
		for _, p := range r.Positions.Ranges() {
			k.Positions.Add(p.First, p.Last)
		}
		for _, st := range r.Streams {
			rs := k.Streams[st.Device+"/"+st.Stream]
			if rs == nil {
				rs = &ranges.RangeSet{}
				k.Streams[st.Device+"/"+st.Stream] = rs
			}
			for _, l := range st.Lost.Ranges() {
				k.Events += rs.Add(l.First, l.Last)
			}
		}
	}
	return k
}

// newDamageRecord is the record of the loss dmg found.
func NewDamageRecord(nowNs int64, dmg *LogDamage, devices []string, lost []LostStream) *DamageRecord {
	return &DamageRecord{TimeNs: nowNs, Positions: dmg.Positions.Clone(), FromServerNs: dmg.fromNs,
		ToServerNs: dmg.toNs, Devices: devices, Streams: lost, Why: dmg.why}
}
