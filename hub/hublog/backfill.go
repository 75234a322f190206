package hublog

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	badger "github.com/dgraph-io/badger/v4"

	"edgeflow/hub/ranges"
	"edgeflow/wire"
)

// Cluster mode's backfill keys: a hub restored from a state snapshot
// fills its local log with the batches the snapshot's state already holds,
// read back from the stream, so that the event listing is whole. Those
// entries live apart from the log (PrefixWAL): recovery never replays
// them, retention of the log never counts them, and a replay never applies
// them twice to the state that already holds them.
const (
	PrefixBackfill     = 'b' // backfilled log entries
	prefixBackfillMeta = 'f' // the plan and the per-stream ranges
	KeyBackfillPlan    = "fP"
)

// BackfillFlag marks a log position as a backfilled entry's: its
// event-time index keys carry BackfillSeq(streamSeq), which no log
// position reaches, and ReadEntry reads such a position from
// PrefixBackfill.
const BackfillFlag uint64 = 1 << 63

// BackfillSeq is the position the event-time index gives the entry
// backfilled from stream sequence streamSeq.
func BackfillSeq(streamSeq uint64) uint64 { return streamSeq | BackfillFlag }

// IsBackfilled reports whether position seq names a backfilled entry.
func IsBackfilled(seq uint64) bool { return seq&BackfillFlag != 0 }

// BackfillKey is b<streamSeq:8><serverTimeNs:8>, the key of the entry
// backfilled from stream sequence streamSeq (with or without the flag):
// one per stream message, so writing it again after a crash overwrites
// instead of adding.
func BackfillKey(streamSeq uint64, serverTimeNs int64) []byte {
	k := WALKey(streamSeq&^BackfillFlag, serverTimeNs)
	k[0] = PrefixBackfill
	return k
}

// BackfillLimitKey is fL<device>\x00<streamID:16>: the applied ranges of
// the stream that the restored snapshot held, the events the backfill may
// list.
func BackfillLimitKey(device string, stream wire.StreamID) []byte {
	return append([]byte{prefixBackfillMeta, 'L'}, RangesKey(device, stream)[1:]...)
}

// BackfillDoneKey is fD<device>\x00<streamID:16>: the ranges of the
// stream the backfill has listed so far.
func BackfillDoneKey(device string, stream wire.StreamID) []byte {
	return append([]byte{prefixBackfillMeta, 'D'}, RangesKey(device, stream)[1:]...)
}

// BackfillRangesPrefixes are the key prefixes of the backfill's
// per-stream ranges (BackfillLimitKey, BackfillDoneKey), deleted once it
// is finished.
func BackfillRangesPrefixes() [][]byte {
	return [][]byte{{prefixBackfillMeta, 'L'}, {prefixBackfillMeta, 'D'}}
}

// BackfillPlan is the backfill's plan and progress, written with the
// restored snapshot and updated in each transaction of backfilled
// entries.
type BackfillPlan struct {
	// Stream is the stream's name; Positions the restored snapshot's
	// last sequence of each partition: the backfill reads up to them.
	Stream    string         `json:"stream"`
	Positions map[int]uint64 `json:"positions"`
	// Through is the last stream sequence handled (listed or skipped);
	// a restart resumes after it.
	Through uint64 `json:"through"`
	// Entries counts the entries written.
	Entries uint64 `json:"entries"`
	// IncompleteBeforeNs, when not 0, is the time of the oldest message
	// the stream still held when the backfill read it: batches stored
	// before it were dropped by retention and are not backfilled.
	IncompleteBeforeNs int64 `json:"incomplete_before_ns,omitempty"`
	// Finished is set once every message up to Positions was read.
	Finished bool `json:"finished"`
}

// End is the highest sequence the plan reads up to.
func (p *BackfillPlan) End() uint64 {
	var end uint64
	for _, s := range p.Positions {
		end = max(end, s)
	}
	return end
}

// SetBackfillPlan writes p in txn.
func SetBackfillPlan(txn *badger.Txn, p *BackfillPlan) error {
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	return txn.Set([]byte(KeyBackfillPlan), b)
}

// LoadBackfillPlan reads the backfill's plan; nil when the store holds
// none (no snapshot was restored into it).
func (s *Store) LoadBackfillPlan() (*BackfillPlan, error) {
	var p *BackfillPlan
	err := s.DB.View(func(txn *badger.Txn) error {
		item, err := txn.Get([]byte(KeyBackfillPlan))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		return item.Value(func(v []byte) error {
			p = &BackfillPlan{}
			if err := json.Unmarshal(v, p); err != nil {
				return fmt.Errorf("%w: backfill plan: %v", ErrCorrupt, err)
			}
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("hub store %s: %w", s.Dir, err)
	}
	return p, nil
}

// LoadRangeSet reads the range set at key in txn; an absent key is ok
// false.
func LoadRangeSet(txn *badger.Txn, key []byte) (rs ranges.RangeSet, ok bool, err error) {
	item, err := txn.Get(key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return rs, false, nil
	}
	if err != nil {
		return rs, false, err
	}
	err = item.Value(func(v []byte) error {
		rs, _, err = ranges.DecodeRangeSet(v)
		return err
	})
	if err != nil {
		return rs, false, fmt.Errorf("%w: ranges at %x: %v", ErrCorrupt, key, err)
	}
	return rs, true, nil
}

// EncodeRangeSet is the value of a backfill ranges key.
func EncodeRangeSet(rs *ranges.RangeSet) []byte {
	return rs.AppendBinary(make([]byte, 0, 8+binary.MaxVarintLen64*2*rs.Len()))
}
