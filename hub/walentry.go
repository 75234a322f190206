package hub

import (
	"encoding/binary"
	"errors"
	"fmt"

	"edgeflow/hub/ranges"
	"edgeflow/wire"
)

// entryKind says what a log entry holds.
type entryKind byte

// Log entry kinds.
const (
	entryBatch  entryKind = 1 // an accepted batch (payload: the batch frame)
	entryStatus entryKind = 2 // a device status message (payload: the status frame)
	// entryTick moves the consumers' processing time to the entry's server
	// time (no payload). Ticks are logged so that a replay or a rebuild
	// sees them at the same log positions as the live run did.
	entryTick entryKind = 3
	// entryRetire retires the entry's stream (no payload): the committer
	// deletes the stream's ranges key in the same transaction, the applier
	// removes the stream from the registry and the StreamRetirers
	// (streamcap.go).
	entryRetire entryKind = 4
)

// entryVersion is the version byte that starts every log entry value.
// Entries with refused events start with entryVersionRefused instead and
// carry the refused ranges after the estimate; every other entry keeps
// version 1's bytes.
const (
	entryVersion        = 1
	entryVersionRefused = 2
)

// Key prefixes of the hub's Badger store; see the package doc.
const (
	prefixWAL        = 'w'
	prefixRanges     = 'r'
	keyCheckpoint    = "c"
	prefixCheckpoint = 'k'
)

// ErrCorrupt is wrapped by errors about stored data the hub cannot read.
// The message names the key; see ErrStoreDamaged and ErrLogDamaged for
// what the operator can do.
var ErrCorrupt = errors.New("hub: corrupt store")

// hubEstimate is the hub's own clock estimate of a device when a batch was
// logged; it is stored with the entry so a replay corrects times exactly as
// the first apply did.
type hubEstimate struct {
	ok                      bool
	offsetNs, uncertaintyNs int64
}

// walEntry is one log entry: metadata the hub decided when it accepted the
// message, and the payload as received.
type walEntry struct {
	seq          uint64
	kind         entryKind
	serverTimeNs int64
	device       string
	stream       wire.StreamID
	firstSeq     uint64
	count        uint64
	fresh        []ranges.SeqRange // the sequence ranges this entry applies (refused ones included)
	// refused are the parts of fresh whose events the hub refused one by
	// one (ascending): done for dedup, recorded as gaps, never applied.
	refused []refusedRange
	est     hubEstimate
	payload []byte
}

// refusedRange is a run of sequence numbers of an entry whose events the
// hub refused, and why.
type refusedRange struct {
	ranges.SeqRange
	fault wire.Fault
}

// refusedAt reports whether sequence number seq of e was refused.
func (e *walEntry) refusedAt(seq uint64) bool {
	for _, r := range e.refused {
		if seq >= r.First && seq <= r.Last {
			return true
		}
	}
	return false
}

// appliedRanges is fresh without the refused ranges: the events applied.
func (e *walEntry) appliedRanges() []ranges.SeqRange {
	if len(e.refused) == 0 {
		return e.fresh
	}
	var out []ranges.SeqRange
	for _, f := range e.fresh {
		next := f.First
		for _, r := range e.refused {
			if r.Last < next || r.First > f.Last {
				continue
			}
			if r.First > next {
				out = append(out, ranges.SeqRange{First: next, Last: r.First - 1})
			}
			next = r.Last + 1
		}
		if next <= f.Last && next >= f.First {
			out = append(out, ranges.SeqRange{First: next, Last: f.Last})
		}
	}
	return out
}

// walKey is w<seq:8><serverTimeNs:8>: ordered by position, and retention
// reads an entry's age from its key without reading the value.
func walKey(seq uint64, serverTimeNs int64) []byte {
	k := make([]byte, 17)
	k[0] = prefixWAL
	binary.BigEndian.PutUint64(k[1:], seq)
	binary.BigEndian.PutUint64(k[9:], uint64(serverTimeNs))
	return k
}

// parseWALKey returns the position and server time in a log key.
func parseWALKey(k []byte) (seq uint64, serverTimeNs int64, err error) {
	if len(k) != 17 || k[0] != prefixWAL {
		return 0, 0, fmt.Errorf("%w: log key %x", ErrCorrupt, k)
	}
	return binary.BigEndian.Uint64(k[1:]), int64(binary.BigEndian.Uint64(k[9:])), nil
}

// walSeekKey is the smallest log key at position seq or after.
func walSeekKey(seq uint64) []byte {
	k := make([]byte, 9)
	k[0] = prefixWAL
	binary.BigEndian.PutUint64(k[1:], seq)
	return k
}

// rangesKey is r<device>\x00<streamID:16>. Device ids never hold a 0 byte.
func rangesKey(device string, stream wire.StreamID) []byte {
	k := make([]byte, 0, 2+len(device)+16)
	k = append(k, prefixRanges)
	k = append(k, device...)
	k = append(k, 0)
	return append(k, stream[:]...)
}

// parseRangesKey splits a ranges key.
func parseRangesKey(k []byte) (string, wire.StreamID, error) {
	var id wire.StreamID
	if len(k) < 1+1+1+16 || k[0] != prefixRanges || k[len(k)-17] != 0 {
		return "", id, fmt.Errorf("%w: ranges key %x", ErrCorrupt, k)
	}
	copy(id[:], k[len(k)-16:])
	return string(k[1 : len(k)-17]), id, nil
}

// encode appends the entry's value: version, kind, metadata, payload.
func (e *walEntry) encode() []byte {
	b := make([]byte, 0, 64+len(e.device)+16*len(e.fresh)+24*len(e.refused)+len(e.payload))
	version := byte(entryVersion)
	if len(e.refused) > 0 {
		version = entryVersionRefused
	}
	b = append(b, version, byte(e.kind))
	b = binary.AppendVarint(b, e.serverTimeNs)
	b = binary.AppendUvarint(b, uint64(len(e.device)))
	b = append(b, e.device...)
	b = append(b, e.stream[:]...)
	b = binary.AppendUvarint(b, e.firstSeq)
	b = binary.AppendUvarint(b, e.count)
	b = binary.AppendUvarint(b, uint64(len(e.fresh)))
	for _, r := range e.fresh {
		b = binary.AppendUvarint(b, r.First)
		b = binary.AppendUvarint(b, r.Last-r.First)
	}
	if e.est.ok {
		b = append(b, 1)
		b = binary.AppendVarint(b, e.est.offsetNs)
		b = binary.AppendVarint(b, e.est.uncertaintyNs)
	} else {
		b = append(b, 0)
	}
	if version == entryVersionRefused {
		b = binary.AppendUvarint(b, uint64(len(e.refused)))
		for _, r := range e.refused {
			b = binary.AppendUvarint(b, r.First)
			b = binary.AppendUvarint(b, r.Last-r.First)
			b = append(b, byte(r.fault))
		}
	}
	return append(b, e.payload...)
}

// entryReader decodes the fields of an entry value in order.
type entryReader struct {
	b   []byte
	err error
}

func (r *entryReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errors.New("bad varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *entryReader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = errors.New("bad varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *entryReader) bytes(n uint64) []byte {
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.err = errors.New("truncated")
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

// decodeWALEntry parses an entry value; the payload aliases v.
func decodeWALEntry(seq uint64, v []byte) (*walEntry, error) {
	if len(v) < 2 || (v[0] != entryVersion && v[0] != entryVersionRefused) {
		return nil, fmt.Errorf("%w: log entry %d: unknown version", ErrCorrupt, seq)
	}
	e := &walEntry{seq: seq, kind: entryKind(v[1])}
	r := entryReader{b: v[2:]}
	e.serverTimeNs = r.varint()
	e.device = string(r.bytes(r.uvarint()))
	copy(e.stream[:], r.bytes(16))
	e.firstSeq = r.uvarint()
	e.count = r.uvarint()
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.err = errors.New("bad range count")
	}
	for i := uint64(0); i < n && r.err == nil; i++ {
		first := r.uvarint()
		e.fresh = append(e.fresh, ranges.SeqRange{First: first, Last: first + r.uvarint()})
	}
	if flag := r.bytes(1); r.err == nil && flag[0] == 1 {
		e.est = hubEstimate{ok: true, offsetNs: r.varint(), uncertaintyNs: r.varint()}
	}
	if v[0] == entryVersionRefused {
		n := r.uvarint()
		if n > uint64(len(r.b)) {
			r.err = errors.New("bad refused count")
		}
		for i := uint64(0); i < n && r.err == nil; i++ {
			first := r.uvarint()
			last := first + r.uvarint()
			f := r.bytes(1)
			if r.err == nil {
				e.refused = append(e.refused, refusedRange{ranges.SeqRange{First: first, Last: last}, wire.Fault(f[0])})
			}
		}
	}
	if r.err != nil {
		return nil, fmt.Errorf("%w: log entry %d: %v", ErrCorrupt, seq, r.err)
	}
	e.payload = r.b
	return e, nil
}
