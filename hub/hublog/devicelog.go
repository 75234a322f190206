package hublog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	badger "github.com/dgraph-io/badger/v4"
)

// The device log index lets GET /v1/events read one device's log entries
// without reading the whole fleet's: every batch entry gets a key
//
//	e<device>\x00<serverTimeNs:8><position:8>
//
// with no value, written in the same transaction as the entry itself, so
// the two are never apart after a crash. A device's keys sort by server
// time, which is what the endpoint bounds its reads by.
//
// A store that logged entries before the index existed has no keys for
// them. KeyDeviceLogSince records the server time from which on the index
// is complete; a query that starts before it reads the log itself, as
// before.

// loadDeviceLogSince reads the server time from which the device index is
// complete, recording it first if this store has none: the start of time
// for an empty log, else a time after every entry already logged (server
// times are ordered by position only up to serverTimeSlack).
func (s *Store) LoadDeviceLogSince(nowNs int64) (int64, error) {
	var since int64
	found := false
	err := s.DB.View(func(txn *badger.Txn) error {
		item, err := txn.Get([]byte(KeyDeviceLogSince))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		return item.Value(func(v []byte) error {
			n := 0
			since, n = binary.Varint(v)
			if n <= 0 || n != len(v) {
				return fmt.Errorf("%w: device log marker %x", ErrCorrupt, v)
			}
			found = true
			return nil
		})
	})
	if err != nil || found {
		return since, err
	}
	last, lastNs, err := s.lastWALEntry()
	if err != nil {
		return 0, err
	}
	since = math.MinInt64
	if last > 0 {
		since = max(lastNs, nowNs) + int64(ServerTimeSlack)
	}
	err = s.DB.Update(func(txn *badger.Txn) error {
		return txn.Set([]byte(KeyDeviceLogSince), binary.AppendVarint(nil, since))
	})
	return since, err
}

// readEntry reads the log entry at position seq with server time
// serverTimeNs; ok is false if it is gone (retention deletes entries
// before their index keys).
func (s *Store) readEntry(txn *badger.Txn, seq uint64, serverTimeNs int64) (e *Entry, ok bool, err error) {
	item, err := txn.Get(WALKey(seq, serverTimeNs))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	e, err = walItemEntry(item, seq)
	return e, err == nil, err
}

// deviceEntries calls fn with each of device's batch entries whose server
// time is in [fromNs, toNs), in server-time order.
func (s *Store) DeviceEntries(device string, fromNs, toNs int64, fn func(*Entry) error) error {
	return s.DB.View(func(txn *badger.Txn) error {
		prefix := deviceLogPrefix(device)
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer it.Close()
		// fromNs is never negative: the API takes no time before 2000.
		for it.Seek(binary.BigEndian.AppendUint64(prefix, uint64(fromNs))); it.Valid(); it.Next() {
			_, t, seq, err := ParseDeviceLogKey(it.Item().Key())
			if err != nil {
				return err
			}
			if t >= toNs {
				return nil
			}
			e, ok, err := s.readEntry(txn, seq, t)
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

// expiredDeviceLogKeys returns up to limit index keys older than cutoff
// and at or below position pos, starting at key from (nil: the first),
// and the key to start the next call at (nil: none left). It walks device
// by device, skipping to the next device at its first key that is kept,
// so a whole retention pass costs the expired keys plus one seek per
// device.
func (s *Store) ExpiredDeviceLogKeys(cutoff int64, pos uint64, from []byte, limit int) (keys [][]byte, next []byte, err error) {
	err = s.DB.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{PrefixDeviceLog}})
		defer it.Close()
		if from == nil {
			from = []byte{PrefixDeviceLog}
		}
		it.Seek(from)
		for it.Valid() {
			if len(keys) == limit {
				next = it.Item().KeyCopy(nil)
				return nil
			}
			dev, t, seq, err := ParseDeviceLogKey(it.Item().Key())
			if err != nil {
				return err
			}
			if t < cutoff && seq <= pos {
				keys = append(keys, it.Item().KeyCopy(nil))
				it.Next()
				continue
			}
			// Keys sort by time within a device: none after this one
			// expires. The next device starts after every key of this one.
			after := deviceLogPrefix(dev)
			after[len(after)-1] = 1
			it.Seek(after)
		}
		return nil
	})
	return keys, next, err
}
