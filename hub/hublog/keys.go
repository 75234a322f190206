package hublog

import (
	"encoding/binary"
	"fmt"

	"edgeflow/wire"
)

// The key prefixes of the hub's Badger store, every one of them; the
// package doc shows the layout of each key.
const (
	PrefixWAL         = 'w'  // log entries
	PrefixRanges      = 'r'  // a stream's applied sequence ranges
	KeyCheckpoint     = "c"  // the newest checkpoint's pointer
	KeyPrevCheckpoint = "c1" // the pointer of the checkpoint before it
	prefixCheckpoint  = 'k'  // checkpoint state chunks
	prefixDamage      = 'x'  // recorded losses to store damage
	PrefixEventIndex  = 't'  // the event-time index of batch entries (no values but the catch-all's)
	KeyEventIndex     = "i"  // marks a store whose event-time index covers the whole log
	PrefixArrivalOld  = 'e'  // the arrival index the event-time index replaced (deleted at its build)
	KeyArrivalOld     = "s"  // that arrival index's marker (deleted at the build)
	PrefixPartials    = 'a'  // evicted aggregate partials, base resolution
	prefixTiers       = 'd'  // downsampled aggregate partials
	PrefixLogPosition = 'p'  // cluster mode: last stream sequence committed per partition
	PrefixAlertChange = 'l'  // the alert-change log alert outputs deliver from
	PrefixAlertOutput = 'o'  // an alert output's delivered position
)

// WALKey is w<seq:8><serverTimeNs:8>: ordered by position, and retention
// reads an entry's age from its key without reading the value.
func WALKey(seq uint64, serverTimeNs int64) []byte {
	k := make([]byte, 17)
	k[0] = PrefixWAL
	binary.BigEndian.PutUint64(k[1:], seq)
	binary.BigEndian.PutUint64(k[9:], uint64(serverTimeNs))
	return k
}

// parseWALKey returns the position and server time in a log key.
func ParseWALKey(k []byte) (seq uint64, serverTimeNs int64, err error) {
	if len(k) != 17 || k[0] != PrefixWAL {
		return 0, 0, fmt.Errorf("%w: log key %x", ErrCorrupt, k)
	}
	return binary.BigEndian.Uint64(k[1:]), int64(binary.BigEndian.Uint64(k[9:])), nil
}

// walSeekKey is the smallest log key at position seq or after.
func walSeekKey(seq uint64) []byte {
	k := make([]byte, 9)
	k[0] = PrefixWAL
	binary.BigEndian.PutUint64(k[1:], seq)
	return k
}

// RangesKey is r<device>\x00<streamID:16>. Device ids never hold a 0 byte.
func RangesKey(device string, stream wire.StreamID) []byte {
	k := make([]byte, 0, 2+len(device)+16)
	k = append(k, PrefixRanges)
	k = append(k, device...)
	k = append(k, 0)
	return append(k, stream[:]...)
}

// parseRangesKey splits a ranges key.
func parseRangesKey(k []byte) (string, wire.StreamID, error) {
	var id wire.StreamID
	if len(k) < 1+1+1+16 || k[0] != PrefixRanges || k[len(k)-17] != 0 {
		return "", id, fmt.Errorf("%w: ranges key %x", ErrCorrupt, k)
	}
	copy(id[:], k[len(k)-16:])
	return string(k[1 : len(k)-17]), id, nil
}

// chunkKey is k<generation:8><index:4>.
func chunkKey(gen uint64, i int) []byte {
	k := make([]byte, 13)
	k[0] = prefixCheckpoint
	binary.BigEndian.PutUint64(k[1:], gen)
	binary.BigEndian.PutUint32(k[9:], uint32(i))
	return k
}

// EventIndexLevelAll is the event-time index's catch-all level; levels
// below it are bucket sizes (minute, hour, day, see package
// hub/eventtime).
const EventIndexLevelAll = 3

// EventKeyFixLen is the length of an event-time index key after its
// device and the 0 that ends it: level, bucket start, position, server
// time.
const EventKeyFixLen = 1 + 8 + 8 + 8

// EventIndexPrefix is the prefix of all of device's event-time index
// keys, t<device>\x00, with room for the rest of a key.
func EventIndexPrefix(device string) []byte {
	k := make([]byte, 0, 2+len(device)+EventKeyFixLen)
	k = append(k, PrefixEventIndex)
	k = append(k, device...)
	return append(k, 0)
}

// SortableNs encodes a signed time so that byte order is time order.
func SortableNs(ns int64) uint64 { return uint64(ns) ^ 1<<63 }

// UnsortableNs is the inverse of SortableNs.
func UnsortableNs(u uint64) int64 { return int64(u ^ 1<<63) }

// AppendEventIndexKey appends to prefix (from EventIndexPrefix) the rest
// of the key of the entry at position seq for one bucket:
// <level:1><bucketStart:8><position:8><serverTimeNs:8>.
func AppendEventIndexKey(prefix []byte, level byte, bucket int64, seq uint64, serverTimeNs int64) []byte {
	k := append(prefix, level)
	k = binary.BigEndian.AppendUint64(k, SortableNs(bucket))
	k = binary.BigEndian.AppendUint64(k, seq)
	return binary.BigEndian.AppendUint64(k, uint64(serverTimeNs))
}

// EventIndexKey is one parsed event-time index key.
type EventIndexKey struct {
	Device       string
	Level        byte
	Bucket       int64
	Seq          uint64
	ServerTimeNs int64
}

// ParseEventIndexKey splits an event-time index key. Device ids never
// hold a 0 byte, so the byte before the fixed part ends the device.
func ParseEventIndexKey(k []byte) (EventIndexKey, error) {
	n := len(k) - EventKeyFixLen
	if n < 3 || k[0] != PrefixEventIndex || k[n-1] != 0 || k[n] > EventIndexLevelAll {
		return EventIndexKey{}, fmt.Errorf("%w: event index key %x", ErrCorrupt, k)
	}
	return EventIndexKey{
		Device: string(k[1 : n-1]), Level: k[n],
		Bucket:       UnsortableNs(binary.BigEndian.Uint64(k[n+1:])),
		Seq:          binary.BigEndian.Uint64(k[n+9:]),
		ServerTimeNs: int64(binary.BigEndian.Uint64(k[n+17:])),
	}, nil
}

// partialKey is the key of a partial of any tier.
func partialKey(gen uint64, tier uint8, series uint32, bucket int64) []byte {
	if tier == 0 {
		k := make([]byte, partialKeyLen)
		k[0] = PrefixPartials
		binary.BigEndian.PutUint64(k[1:], gen)
		binary.BigEndian.PutUint32(k[9:], series)
		binary.BigEndian.PutUint64(k[13:], uint64(bucket)^(1<<63))
		return k
	}
	k := make([]byte, tierKeyLen)
	k[0] = prefixTiers
	binary.BigEndian.PutUint64(k[1:], gen)
	k[9] = tier
	binary.BigEndian.PutUint32(k[10:], series)
	binary.BigEndian.PutUint64(k[14:], uint64(bucket)^(1<<63))
	return k
}

// seriesPrefix is the prefix of one tier's partials of a series.
func seriesPrefix(gen uint64, tier uint8, series uint32) []byte {
	k := partialKey(gen, tier, series, 0)
	return k[:len(k)-8]
}

// parsePartialKey splits the key of a partial of any tier; ok is false
// for a key of another layout.
func parsePartialKey(k []byte) (gen uint64, tier uint8, series uint32, bucket int64, ok bool) {
	switch {
	case len(k) == partialKeyLen && k[0] == PrefixPartials:
		return binary.BigEndian.Uint64(k[1:]), 0, binary.BigEndian.Uint32(k[9:]), int64(binary.BigEndian.Uint64(k[13:]) ^ (1 << 63)), true
	case len(k) == tierKeyLen && k[0] == prefixTiers && k[9] > 0:
		return binary.BigEndian.Uint64(k[1:]), k[9], binary.BigEndian.Uint32(k[10:]), int64(binary.BigEndian.Uint64(k[14:]) ^ (1 << 63)), true
	}
	return 0, 0, 0, 0, false
}
