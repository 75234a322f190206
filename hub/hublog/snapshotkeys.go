package hublog

import (
	"encoding/binary"
	"fmt"

	badger "github.com/dgraph-io/badger/v4"
)

// PartialPrefixes are the key prefixes of one partial store generation's
// partials, base resolution and downsampled tiers: what a cluster-mode
// state snapshot copies along with the engine's snapshot, which refers to
// them.
func PartialPrefixes(gen uint64) [][]byte {
	return [][]byte{
		binary.BigEndian.AppendUint64([]byte{PrefixPartials}, gen),
		binary.BigEndian.AppendUint64([]byte{prefixTiers}, gen),
	}
}

// CheckPartialKey says whether k is a partial's key of generation gen, of
// either layout; a snapshot being restored holds nothing else.
func CheckPartialKey(k []byte, gen uint64) error {
	for i, p := range PartialPrefixes(gen) {
		want := partialKeyLen
		if i == 1 {
			want = tierKeyLen
		}
		if len(k) == want && string(k[:len(p)]) == string(p) {
			return nil
		}
	}
	return fmt.Errorf("%w: %x is not a partial key of generation %d", ErrCorrupt, k, gen)
}

// IsEmpty reports whether the store holds no log entry, applied range or
// stream position: a new data directory, or one a snapshot restore
// stopped in before writing its ranges and positions (partials and a
// checkpoint alone are rewritten by the next restore).
func (s *Store) IsEmpty() (bool, error) {
	empty := true
	err := s.DB.View(func(txn *badger.Txn) error {
		for _, p := range [][]byte{{PrefixWAL}, {PrefixRanges}, {PrefixLogPosition}} {
			it := txn.NewIterator(badger.IteratorOptions{Prefix: p})
			it.Rewind()
			if it.Valid() {
				empty = false
			}
			it.Close()
			if !empty {
				return nil
			}
		}
		return nil
	})
	return empty, err
}
