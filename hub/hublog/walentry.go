package hublog

import (
	"encoding/binary"
	"errors"
	"fmt"

	"edgeflow/hub/ranges"
	"edgeflow/wire"
)

// Kind says what a log entry holds.
type Kind byte

// Log entry kinds.
const (
	KindBatch  Kind = 1 // an accepted batch (payload: the batch frame)
	KindStatus Kind = 2 // a device status message (payload: the status frame)
	// KindTick moves the consumers' processing time to the entry's server
	// time (no payload). Ticks are logged so that a replay or a rebuild
	// sees them at the same log positions as the live run did.
	KindTick Kind = 3
	// KindRetire retires the entry's stream (no payload): the committer
	// deletes the stream's ranges key in the same transaction, the applier
	// removes the stream from the registry and the StreamRetirers
	// (streamcap.go).
	KindRetire Kind = 4
	// KindAttrs writes a version of the entry's device's attributes
	// (payload: package hub/attrs' EncodeVersion; the version's write
	// time is the entry's server time). The applier puts it in the
	// attribute table in log order, so replay rebuilds the table.
	KindAttrs Kind = 5
	// KindOwn changes which stream partitions' devices this hub holds
	// (cluster mode with several hubs; payload: package hub's ownership
	// record): it drops a partition's devices, or drops them and imports
	// another hub's checkpoint of them. Logged, so replay and the
	// committer's dedup state follow the same order as the live run.
	KindOwn Kind = 6
)

// entryVersion is the version byte that starts every log entry value.
// Entries with refused events start with entryVersionRefused instead and
// carry the refused ranges after the estimate; every other entry keeps
// version 1's bytes.
const (
	entryVersion        = 1
	entryVersionRefused = 2
)

// HubEstimate is the hub's own clock estimate of a device when a batch was
// logged; it is stored with the entry so a replay corrects times exactly as
// the first apply did.
type HubEstimate struct {
	OK                      bool
	OffsetNs, UncertaintyNs int64
}

// Entry is one log entry: metadata the hub decided when it accepted the
// message, and the payload as received.
type Entry struct {
	Seq          uint64
	Kind         Kind
	ServerTimeNs int64
	Device       string
	Stream       wire.StreamID
	FirstSeq     uint64
	Count        uint64
	Fresh        []ranges.SeqRange // the sequence ranges this entry applies (refused ones included)
	// refused are the parts of fresh whose events the hub refused one by
	// one (ascending): done for dedup, recorded as gaps, never applied.
	Refused []RefusedRange
	Est     HubEstimate
	Payload []byte
}

// RefusedRange is a run of sequence numbers of an entry whose events the
// hub refused, and why.
type RefusedRange struct {
	ranges.SeqRange
	Fault wire.Fault
}

// refusedAt reports whether sequence number seq of e was refused.
func (e *Entry) RefusedAt(seq uint64) bool {
	for _, r := range e.Refused {
		if seq >= r.First && seq <= r.Last {
			return true
		}
	}
	return false
}

// appliedRanges is fresh without the refused ranges: the events applied.
func (e *Entry) AppliedRanges() []ranges.SeqRange {
	if len(e.Refused) == 0 {
		return e.Fresh
	}
	var out []ranges.SeqRange
	for _, f := range e.Fresh {
		next := f.First
		for _, r := range e.Refused {
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

// encode appends the entry's value: version, kind, metadata, payload.
func (e *Entry) Encode() []byte {
	b := make([]byte, 0, 64+len(e.Device)+16*len(e.Fresh)+24*len(e.Refused)+len(e.Payload))
	version := byte(entryVersion)
	if len(e.Refused) > 0 {
		version = entryVersionRefused
	}
	b = append(b, version, byte(e.Kind))
	b = binary.AppendVarint(b, e.ServerTimeNs)
	b = binary.AppendUvarint(b, uint64(len(e.Device)))
	b = append(b, e.Device...)
	b = append(b, e.Stream[:]...)
	b = binary.AppendUvarint(b, e.FirstSeq)
	b = binary.AppendUvarint(b, e.Count)
	b = binary.AppendUvarint(b, uint64(len(e.Fresh)))
	for _, r := range e.Fresh {
		b = binary.AppendUvarint(b, r.First)
		b = binary.AppendUvarint(b, r.Last-r.First)
	}
	if e.Est.OK {
		b = append(b, 1)
		b = binary.AppendVarint(b, e.Est.OffsetNs)
		b = binary.AppendVarint(b, e.Est.UncertaintyNs)
	} else {
		b = append(b, 0)
	}
	if version == entryVersionRefused {
		b = binary.AppendUvarint(b, uint64(len(e.Refused)))
		for _, r := range e.Refused {
			b = binary.AppendUvarint(b, r.First)
			b = binary.AppendUvarint(b, r.Last-r.First)
			b = append(b, byte(r.Fault))
		}
	}
	return append(b, e.Payload...)
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

// DecodeEntry parses an entry value; the payload aliases v.
func DecodeEntry(seq uint64, v []byte) (*Entry, error) {
	if len(v) < 2 || (v[0] != entryVersion && v[0] != entryVersionRefused) {
		return nil, fmt.Errorf("%w: log entry %d: unknown version", ErrCorrupt, seq)
	}
	e := &Entry{Seq: seq, Kind: Kind(v[1])}
	r := entryReader{b: v[2:]}
	e.ServerTimeNs = r.varint()
	e.Device = string(r.bytes(r.uvarint()))
	copy(e.Stream[:], r.bytes(16))
	e.FirstSeq = r.uvarint()
	e.Count = r.uvarint()
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.err = errors.New("bad range count")
	}
	for i := uint64(0); i < n && r.err == nil; i++ {
		first := r.uvarint()
		e.Fresh = append(e.Fresh, ranges.SeqRange{First: first, Last: first + r.uvarint()})
	}
	if flag := r.bytes(1); r.err == nil && flag[0] == 1 {
		e.Est = HubEstimate{OK: true, OffsetNs: r.varint(), UncertaintyNs: r.varint()}
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
				e.Refused = append(e.Refused, RefusedRange{ranges.SeqRange{First: first, Last: last}, wire.Fault(f[0])})
			}
		}
	}
	if r.err != nil {
		return nil, fmt.Errorf("%w: log entry %d: %v", ErrCorrupt, seq, r.err)
	}
	e.Payload = r.b
	return e, nil
}
