package hublog

import (
	"encoding/binary"
	"fmt"

	badger "github.com/dgraph-io/badger/v4"
)

// LogPositionKey is p<stream>\x00<partition:4>: the key of the last
// sequence of one partition of a NATS JetStream stream that the hub
// committed (cluster mode). Stream names hold no 0 byte.
func LogPositionKey(stream string, partition int) []byte {
	k := make([]byte, 0, 1+len(stream)+1+4)
	k = append(k, PrefixLogPosition)
	k = append(k, stream...)
	k = append(k, 0)
	return binary.BigEndian.AppendUint32(k, uint32(partition))
}

// EncodeLogPosition is the value of a position key.
func EncodeLogPosition(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }

// LoadLogPositions returns the committed position of each partition of
// stream that has one. A key or value of the wrong size is ErrCorrupt.
func (s *Store) LoadLogPositions(stream string) (map[int]uint64, error) {
	prefix := append(append([]byte{PrefixLogPosition}, stream...), 0)
	out := map[int]uint64{}
	err := s.DB.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			k := it.Item().Key()
			if len(k) != len(prefix)+4 {
				return fmt.Errorf("%w: log position key %x", ErrCorrupt, k)
			}
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			if len(v) != 8 {
				return fmt.Errorf("%w: log position %x holds %d bytes, want 8", ErrCorrupt, k, len(v))
			}
			out[int(binary.BigEndian.Uint32(k[len(prefix):]))] = binary.BigEndian.Uint64(v)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("load log positions of stream %s: %w", stream, err)
	}
	return out, nil
}
