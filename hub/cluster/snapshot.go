package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	badger "github.com/dgraph-io/badger/v4"

	"edgeflow/hub/hublog"
	"edgeflow/hub/natslog"
)

// The state snapshot's encoding (natslog.Snapshot.State): "EFHS", a
// version byte, the stream's name (its length, at most 64, and bytes),
// the local log position the state covers, the partial
// store's generation, the state's length and bytes, the partial count,
// then each partial's key and value, every length a uvarint.
const (
	SnapMagic   = "EFHS"
	SnapVersion = 1
)

// Snap is a state snapshot's content: the hub's applied state, the local
// log position it covers and the aggregate partials it refers to, so a
// hub on an empty data directory can rebuild its store from it.
type Snap struct {
	Stream string // the stream the positions belong to; a hub restores only its own stream's
	WALPos uint64 // the local log position the state covers
	Gen    uint64 // the partial store's generation
	State  []byte
	// Partials are the stored aggregate partials (Badger key and value)
	// of generation Gen. Decode fills them; Encode writes them before
	// those it reads from its Badger read.
	Partials []Partial
}

// Partial is one stored aggregate partial: its Badger key and value.
type Partial struct{ Key, Value []byte }

// Encode builds the snapshot's bytes: s's partials, then those of
// generation s.Gen that txn (if not nil) holds. It fails once the bytes
// exceed maxBytes (natslog.ErrSnapshotTooLarge), checked after each
// partial. The caller discards txn.
func Encode(s *Snap, txn *badger.Txn, maxBytes int64) ([]byte, error) {
	b := append([]byte(SnapMagic), SnapVersion)
	b = binary.AppendUvarint(b, uint64(len(s.Stream)))
	b = append(b, s.Stream...)
	b = binary.AppendUvarint(b, s.WALPos)
	b = binary.AppendUvarint(b, s.Gen)
	b = binary.AppendUvarint(b, uint64(len(s.State)))
	b = append(b, s.State...)
	var parts []byte
	n := 0
	add := func(k, v []byte) error {
		parts = binary.AppendUvarint(parts, uint64(len(k)))
		parts = append(parts, k...)
		parts = binary.AppendUvarint(parts, uint64(len(v)))
		parts = append(parts, v...)
		n++
		if int64(len(b)+len(parts)) > maxBytes {
			return fmt.Errorf("%w: state and partials exceed %d bytes", natslog.ErrSnapshotTooLarge, maxBytes)
		}
		return nil
	}
	for _, p := range s.Partials {
		if err := add(p.Key, p.Value); err != nil {
			return nil, err
		}
	}
	if txn != nil {
		for _, prefix := range hublog.PartialPrefixes(s.Gen) {
			it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true, PrefetchSize: 256})
			for it.Rewind(); it.Valid(); it.Next() {
				err := it.Item().Value(func(v []byte) error { return add(it.Item().Key(), v) })
				if err != nil {
					it.Close()
					return nil, err
				}
			}
			it.Close()
		}
	}
	b = binary.AppendUvarint(b, uint64(n))
	return append(b, parts...), nil
}

// Decode decodes a state snapshot, bounding every length by what
// remains and checking each partial's key is of the snapshot's
// generation. The result's slices alias b.
func Decode(b []byte) (*Snap, error) {
	if len(b) < len(SnapMagic)+1 || string(b[:len(SnapMagic)]) != SnapMagic {
		return nil, errors.New("not a hub state snapshot (magic)")
	}
	if b[len(SnapMagic)] != SnapVersion {
		return nil, fmt.Errorf("hub state snapshot version %d, this hub reads %d", b[len(SnapMagic)], SnapVersion)
	}
	b = b[len(SnapMagic)+1:]
	uv := func(what string) (uint64, error) {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, fmt.Errorf("bad %s", what)
		}
		b = b[n:]
		return v, nil
	}
	bytesOf := func(what string) ([]byte, error) {
		n, err := uv(what + " length")
		if err != nil {
			return nil, err
		}
		if n > uint64(len(b)) {
			return nil, fmt.Errorf("%s of %d bytes, %d remain", what, n, len(b))
		}
		out := b[:n]
		b = b[n:]
		return out, nil
	}
	d := &Snap{}
	stream, err := bytesOf("stream name")
	if err != nil {
		return nil, err
	}
	if len(stream) > 64 {
		return nil, fmt.Errorf("stream name of %d bytes", len(stream))
	}
	d.Stream = string(stream)
	if d.WALPos, err = uv("log position"); err != nil {
		return nil, err
	}
	if d.Gen, err = uv("partial generation"); err != nil {
		return nil, err
	}
	if d.State, err = bytesOf("state"); err != nil {
		return nil, err
	}
	count, err := uv("partial count")
	if err != nil {
		return nil, err
	}
	if count > uint64(len(b))/2 {
		return nil, fmt.Errorf("%d partials in %d bytes", count, len(b))
	}
	d.Partials = make([]Partial, 0, count)
	for range count {
		var p Partial
		if p.Key, err = bytesOf("partial key"); err != nil {
			return nil, err
		}
		if err := hublog.CheckPartialKey(p.Key, d.Gen); err != nil {
			return nil, err
		}
		if p.Value, err = bytesOf("partial value"); err != nil {
			return nil, err
		}
		d.Partials = append(d.Partials, p)
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%d bytes after the last partial", len(b))
	}
	return d, nil
}

// RestoreGaps returns the partitions whose position + 1 is before the
// stream's first sequence, whose messages after their position the
// stream may have dropped: of 0..n-1 (no position counts as 0), or with
// n == 0 of those in pos; in increasing order.
func RestoreGaps(pos map[int]uint64, n int, firstSeq uint64) []int {
	var out []int
	if n == 0 {
		for p, seq := range pos {
			if seq+1 < firstSeq {
				out = append(out, p)
			}
		}
		slices.Sort(out)
		return out
	}
	for p := range n {
		if pos[p]+1 < firstSeq {
			out = append(out, p)
		}
	}
	return out
}
