package hub

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/prometheus/client_golang/prometheus"

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
const prefixDamage = 'x'

// GapReasonStoreDamaged is the gap reason of events lost to a damaged
// store that the hub was told to recover from.
const GapReasonStoreDamaged = "store_damaged"

// damageRecord is one recorded loss.
type damageRecord struct {
	TimeNs int64 `json:"time_ns"`
	// Positions are the log positions lost.
	Positions ranges.RangeSet `json:"positions"`
	// FromServerNs and ToServerNs bound their server times (0: unknown).
	FromServerNs int64 `json:"from_server_ns,omitempty"`
	ToServerNs   int64 `json:"to_server_ns,omitempty"`
	// Devices had entries among them (from the event-time index).
	Devices []string `json:"devices,omitempty"`
	// Streams are the sequence numbers each stream lost, where known.
	Streams []lostStream `json:"streams,omitempty"`
	Why     string       `json:"why,omitempty"`
}

// lostStream is what one stream lost.
type lostStream struct {
	Device string          `json:"device"`
	Stream string          `json:"stream"`
	Lost   ranges.RangeSet `json:"lost"`
}

// logDamage collects what a replay could not read.
type logDamage struct {
	positions    ranges.RangeSet
	fromNs, toNs int64
	unreadable   [][]byte // keys of entries that exist but cannot be read
	why          string
}

// any reports whether damage was found.
func (d *logDamage) any() bool { return d.positions.Len() > 0 }

// add records positions first..last as damaged, minus those in known.
func (d *logDamage) add(first, last uint64, fromNs, toNs int64, why string, known *ranges.RangeSet) bool {
	added := false
	for _, r := range known.Missing(nil, first, last) {
		d.positions.Add(r.First, r.Last)
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
func (d *logDamage) merge(o *logDamage) {
	for _, r := range o.positions.Ranges() {
		d.add(r.First, r.Last, o.fromNs, o.toNs, o.why, &ranges.RangeSet{})
	}
	d.unreadable = append(d.unreadable, o.unreadable...)
}

// err is the error that stops the hub.
func (d *logDamage) err(dir string, devices []string) *LogDamageError {
	e := &LogDamageError{Dir: dir, Positions: d.positions.Clone(), Devices: devices, Why: d.why}
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
func (s *store) replayChecked(from, upTo uint64, startGapOK bool, known *ranges.RangeSet, fn func(*walEntry) error) (*logDamage, error) {
	last, lastNs, err := s.lastWALEntry()
	if err != nil {
		return nil, err
	}
	if upTo > 0 && last > upTo {
		last, lastNs = upTo, 0
	}
	d := &logDamage{}
	next, prevNs, seen := from+1, int64(0), false
	err = s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixWAL}, PrefetchValues: true, PrefetchSize: 16})
		defer it.Close()
		for it.Seek(walSeekKey(from + 1)); it.Valid(); it.Next() {
			seq, t, err := parseWALKey(it.Item().Key())
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
					d.unreadable = append(d.unreadable, it.Item().KeyCopy(nil))
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
func (s *store) firstWALSeq() (uint64, error) {
	var seq uint64
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixWAL}})
		defer it.Close()
		it.Rewind()
		if !it.Valid() {
			return nil
		}
		var err error
		seq, _, err = parseWALKey(it.Item().Key())
		return err
	})
	return seq, err
}

// maxDamageDevices bounds the devices a damage report names.
const maxDamageDevices = 50

// devicesAt returns the devices whose event-time index names an entry at
// one of positions (sorted, at most maxDamageDevices). The index has no
// keys for ticks and status entries.
func (s *store) devicesAt(positions *ranges.RangeSet) []string {
	seen := map[string]bool{}
	_ = s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixEventIndex}})
		defer it.Close()
		for it.Rewind(); it.Valid() && len(seen) < maxDamageDevices; it.Next() {
			k, err := parseEventIndexKey(it.Item().Key())
			if err == nil && positions.Covers(k.seq, k.seq) {
				seen[k.device] = true
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
func (s *store) loadDamageRecords() ([]damageRecord, error) {
	var out []damageRecord
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixDamage}, PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			var r damageRecord
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
func (s *store) writeDamageRecord(r *damageRecord, unreadable [][]byte) error {
	v, err := json.Marshal(r)
	if err != nil {
		return err
	}
	key := binary.BigEndian.AppendUint64([]byte{prefixDamage}, uint64(r.TimeNs))
	err = s.db.Update(func(txn *badger.Txn) error {
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
		return fmt.Errorf("record the loss in %s: %w", s.dir, err)
	}
	return s.db.Sync()
}

// knownLosses are the recorded losses by position and by stream.
type knownLosses struct {
	positions ranges.RangeSet
	streams   map[string]*ranges.RangeSet // device + "/" + stream
	events    uint64
}

// lossesOf indexes records.
func lossesOf(records []damageRecord) *knownLosses {
	k := &knownLosses{streams: map[string]*ranges.RangeSet{}}
	for _, r := range records {
		for _, p := range r.Positions.Ranges() {
			k.positions.Add(p.First, p.Last)
		}
		for _, st := range r.Streams {
			rs := k.streams[st.Device+"/"+st.Stream]
			if rs == nil {
				rs = &ranges.RangeSet{}
				k.streams[st.Device+"/"+st.Stream] = rs
			}
			for _, l := range st.Lost.Ranges() {
				k.events += rs.Add(l.First, l.Last)
			}
		}
	}
	return k
}

// recordLoss adds lost sequence numbers to a stream's gaps with reason
// GapReasonStoreDamaged; adding them again changes nothing.
func (r *registry) recordLoss(device, stream string, lost *ranges.RangeSet) {
	r.mu.Lock()
	defer r.mu.Unlock()
	d := r.device(device)
	s := d.Streams[stream]
	if s == nil {
		s = &streamInfo{}
		d.Streams[stream] = s
	}
	for _, l := range lost.Ranges() {
		if added := s.Gaps.Add(l.First, l.Last); added > 0 {
			if s.GapReasons == nil {
				s.GapReasons = map[string]uint64{}
			}
			s.GapReasons[GapReasonStoreDamaged] += added
		}
	}
}

// lostSince compares the durable applied ranges with those the registry
// rebuilt and returns, per stream, the sequence numbers the store says
// were applied but the rebuilt state lacks and no record already lists.
func lostSince(reg *registry, dedup map[streamKey]*dedupState, known *knownLosses) []lostStream {
	reg.mu.RLock()
	defer reg.mu.RUnlock()
	var out []lostStream
	for k, d := range dedup {
		var got ranges.RangeSet
		if dev := reg.devices[k.device]; dev != nil && dev.Streams[k.id.String()] != nil {
			si := dev.Streams[k.id.String()]
			got = si.Applied.Clone()
			// Refused events count as done in the stored ranges too.
			for _, r := range si.Refused.Ranges() {
				got.Add(r.First, r.Last)
			}
		}
		if rs := known.streams[k.device+"/"+k.id.String()]; rs != nil {
			for _, r := range rs.Ranges() {
				got.Add(r.First, r.Last)
			}
		}
		var lost ranges.RangeSet
		for _, r := range d.applied.Ranges() {
			for _, m := range got.Missing(nil, r.First, r.Last) {
				lost.Add(m.First, m.Last)
			}
		}
		if lost.Len() > 0 {
			out = append(out, lostStream{Device: k.device, Stream: k.id.String(), Lost: lost})
		}
	}
	slices.SortFunc(out, func(a, b lostStream) int {
		if a.Device != b.Device {
			return cmpString(a.Device, b.Device)
		}
		return cmpString(a.Stream, b.Stream)
	})
	return out
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// applyLosses puts every recorded loss into the registry.
func applyLosses(reg *registry, records []damageRecord) {
	for _, r := range records {
		for _, st := range r.Streams {
			reg.recordLoss(st.Device, st.Stream, &st.Lost)
		}
	}
}

// newDamageRecord is the record of the loss dmg found.
func newDamageRecord(nowNs int64, dmg *logDamage, devices []string, lost []lostStream) *damageRecord {
	return &damageRecord{TimeNs: nowNs, Positions: dmg.positions.Clone(), FromServerNs: dmg.fromNs,
		ToServerNs: dmg.toNs, Devices: devices, Streams: lost, Why: dmg.why}
}

// damageMetrics count what recovery found damaged (prefix edgeflow_hub_).
type damageMetrics struct {
	fallbacks  *prometheus.CounterVec // by to: previous, log
	damaged    prometheus.Counter
	lostEvents prometheus.Gauge
}

func newDamageMetrics(reg prometheus.Registerer) (*damageMetrics, error) {
	m := &damageMetrics{
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "edgeflow", Subsystem: "hub", Name: "checkpoint_fallbacks_total",
			Help: "Damaged checkpoints passed over at start, by what recovery used instead: previous (the checkpoint before it) or log (a replay of the whole log)."}, []string{"to"}),
		damaged: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "edgeflow", Subsystem: "hub", Name: "store_damaged_entries_total",
			Help: "Log positions found unreadable or missing at start and skipped (recover-damaged); the loss is recorded."}),
		lostEvents: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "edgeflow", Subsystem: "hub", Name: "store_lost_events",
			Help: "Events of known streams recorded as lost to store damage (gap reason store_damaged), over the store's life."}),
	}
	m.fallbacks.WithLabelValues("previous")
	m.fallbacks.WithLabelValues("log")
	for _, c := range []prometheus.Collector{m.fallbacks, m.damaged, m.lostEvents} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
