package hublog

import (
	"encoding/binary"
	"fmt"

	badger "github.com/dgraph-io/badger/v4"
)

// AlertChange is one alert revision in the alert-change log: Seq is the
// rules evaluator's change sequence (rules.Alert.Seq), JSON the alert at
// that revision as GET /v1/alerts lists it.
type AlertChange struct {
	Seq  uint64
	JSON []byte
}

// alertChangeKey is l<seq:8>.
func alertChangeKey(seq uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{PrefixAlertChange}, seq)
}

// alertOutputKey is o<name>.
func alertOutputKey(name string) []byte { return append([]byte{PrefixAlertOutput}, name...) }

// PutAlertChanges writes changes to the alert-change log (not synced: the
// changes are a function of the log, so a crash loses only those the
// replay after the checkpoint writes again, under the same sequences).
func (s *Store) PutAlertChanges(changes []AlertChange) error {
	wb := s.DB.NewWriteBatch()
	defer wb.Cancel()
	for _, c := range changes {
		if err := wb.Set(alertChangeKey(c.Seq), c.JSON); err != nil {
			return err
		}
	}
	return wb.Flush()
}

// AlertChangesAfter returns up to limit changes with Seq > seq, in Seq
// order.
func (s *Store) AlertChangesAfter(seq uint64, limit int) ([]AlertChange, error) {
	var out []AlertChange
	err := s.DB.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{PrefixAlertChange}, PrefetchValues: true, PrefetchSize: min(limit, 100)})
		defer it.Close()
		for it.Seek(alertChangeKey(seq + 1)); it.Valid() && len(out) < limit; it.Next() {
			k := it.Item().Key()
			if len(k) != 9 {
				return fmt.Errorf("%w: alert change key %x", ErrCorrupt, k)
			}
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			out = append(out, AlertChange{Seq: binary.BigEndian.Uint64(k[1:]), JSON: v})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read alert changes after %d: %w", seq, err)
	}
	return out, nil
}

// AlertChangeBounds returns the first and last Seq in the alert-change
// log (0, 0 when it is empty).
func (s *Store) AlertChangeBounds() (first, last uint64, err error) {
	err = s.DB.View(func(txn *badger.Txn) error {
		for _, reverse := range []bool{false, true} {
			it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{PrefixAlertChange}, Reverse: reverse})
			if reverse {
				it.Seek(alertChangeKey(^uint64(0)))
			} else {
				it.Rewind()
			}
			if it.Valid() {
				k := it.Item().Key()
				if len(k) != 9 {
					it.Close()
					return fmt.Errorf("%w: alert change key %x", ErrCorrupt, k)
				}
				if reverse {
					last = binary.BigEndian.Uint64(k[1:])
				} else {
					first = binary.BigEndian.Uint64(k[1:])
				}
			}
			it.Close()
		}
		return nil
	})
	return first, last, err
}

// LoadAlertOutputPositions returns every stored alert output position by
// output name.
func (s *Store) LoadAlertOutputPositions() (map[string]uint64, error) {
	out := map[string]uint64{}
	err := s.DB.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{PrefixAlertOutput}, PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			k := it.Item().Key()
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			if len(v) != 8 {
				return fmt.Errorf("%w: alert output position %q holds %d bytes, want 8", ErrCorrupt, k[1:], len(v))
			}
			out[string(k[1:])] = binary.BigEndian.Uint64(v)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("load alert output positions: %w", err)
	}
	return out, nil
}

// CommitAlertOutput stores output name's position and, in the same
// transaction, deletes the alert changes with Seq <= pruneTo (every
// output has delivered them).
func (s *Store) CommitAlertOutput(name string, pos, pruneFrom, pruneTo uint64) error {
	return s.DB.Update(func(txn *badger.Txn) error {
		if err := txn.Set(alertOutputKey(name), binary.BigEndian.AppendUint64(nil, pos)); err != nil {
			return err
		}
		for seq := pruneFrom; seq != 0 && seq <= pruneTo; seq++ {
			if err := txn.Delete(alertChangeKey(seq)); err != nil {
				return err
			}
		}
		return nil
	})
}

// ResetAlertOutputs deletes the whole alert-change log and sets every
// stored alert output position to pos (a rebuild that changed the alerts:
// the old sequences no longer name the same changes).
func (s *Store) ResetAlertOutputs(pos uint64) error {
	for _, p := range []byte{PrefixAlertChange} {
		if err := s.DB.DropPrefix([]byte{p}); err != nil {
			return fmt.Errorf("delete the alert-change log: %w", err)
		}
	}
	names, err := s.LoadAlertOutputPositions()
	if err != nil {
		return err
	}
	return s.DB.Update(func(txn *badger.Txn) error {
		for name := range names {
			if err := txn.Set(alertOutputKey(name), binary.BigEndian.AppendUint64(nil, pos)); err != nil {
				return err
			}
		}
		return nil
	})
}
