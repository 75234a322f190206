package buffer

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"

	"edgeflow/wire"
)

// Gap is a closed range of sequence numbers that the buffer dropped and will
// never return: reported upstream until an Ack covers it.
type Gap struct {
	First, Last uint64
	Reason      string
}

// Drop reasons carried in gaps.
const (
	ReasonMaxBytes = "max_bytes"
	ReasonMaxAge   = "max_age"
	ReasonCorrupt  = "corrupt"
	// ReasonDiskFull: dropped to keep the filesystem's reserve free
	// (DropOldest with Options.DiskReserve).
	ReasonDiskFull = "disk_full"
)

// maxPendingGaps bounds the gap list kept per stream; older adjacent gaps
// merge (their reason becomes that of the newer one) beyond it.
const maxPendingGaps = 256

// meta is a stream's persistent state; the block keys hold the rest.
type meta struct {
	id      wire.StreamID
	acked   uint64 // every seq <= acked is acknowledged
	head    uint64 // lowest seq that may still be returned (> dropped, > acked)
	next    uint64 // next seq to assign, as far as metadata knows
	created int64  // Unix ms
	gaps    []Gap
}

const metaVersion = 1

func (m *meta) encode() []byte {
	b := make([]byte, 0, 64+len(m.gaps)*24)
	b = append(b, metaVersion)
	b = append(b, m.id[:]...)
	b = binary.AppendUvarint(b, m.acked)
	b = binary.AppendUvarint(b, m.head)
	b = binary.AppendUvarint(b, m.next)
	b = binary.AppendVarint(b, m.created)
	b = binary.AppendUvarint(b, uint64(len(m.gaps)))
	for _, g := range m.gaps {
		b = binary.AppendUvarint(b, g.First)
		b = binary.AppendUvarint(b, g.Last)
		b = binary.AppendUvarint(b, uint64(len(g.Reason)))
		b = append(b, g.Reason...)
	}
	return b
}

func decodeMeta(b []byte) (meta, error) {
	var m meta
	bad := func(what string) (meta, error) {
		return meta{}, fmt.Errorf("%w: stream metadata: %s", ErrCorrupt, what)
	}
	if len(b) < 1+16 || b[0] != metaVersion {
		return bad("short or unknown version")
	}
	copy(m.id[:], b[1:17])
	b = b[17:]
	var fields [3]uint64
	for i := range fields {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return bad("truncated positions")
		}
		fields[i], b = v, b[n:]
	}
	m.acked, m.head, m.next = fields[0], fields[1], fields[2]
	c, n := binary.Varint(b)
	if n <= 0 {
		return bad("truncated creation time")
	}
	m.created, b = c, b[n:]
	count, n := binary.Uvarint(b)
	if n <= 0 || count > maxPendingGaps {
		return bad("gap count")
	}
	b = b[n:]
	m.gaps = make([]Gap, 0, count)
	for range count {
		var g Gap
		var k int
		if g.First, k = binary.Uvarint(b); k <= 0 {
			return bad("gap")
		}
		b = b[k:]
		if g.Last, k = binary.Uvarint(b); k <= 0 {
			return bad("gap")
		}
		b = b[k:]
		l, k := binary.Uvarint(b)
		if k <= 0 || l > uint64(len(b)-k) {
			return bad("gap reason")
		}
		g.Reason = string(b[k : k+int(l)])
		b = b[k+int(l):]
		m.gaps = append(m.gaps, g)
	}
	if m.head == 0 || m.acked >= m.head || m.next < m.head {
		return bad(fmt.Sprintf("positions acked=%d head=%d next=%d are inconsistent", m.acked, m.head, m.next))
	}
	return m, nil
}

// addGap records a dropped range. The list stays sorted and free of
// overlaps (a drop at the front may span a corrupt block dropped earlier),
// adjacent ranges of one reason merge, and beyond maxPendingGaps the two
// oldest merge into one. It returns how many sequence numbers were new.
func (m *meta) addGap(g Gap) uint64 {
	added := uint64(0)
	var out []Gap
	next := g.First
	for _, e := range m.gaps {
		if e.Last < next || e.First > g.Last {
			continue
		}
		if e.First > next {
			out = append(out, Gap{next, e.First - 1, g.Reason})
			added += e.First - next
		}
		next = e.Last + 1
	}
	if next <= g.Last && next >= g.First {
		out = append(out, Gap{next, g.Last, g.Reason})
		added += g.Last - next + 1
	}
	all := append(m.gaps, out...)
	slices.SortFunc(all, func(a, b Gap) int { return cmp.Compare(a.First, b.First) })
	merged := all[:0]
	for _, e := range all {
		if n := len(merged); n > 0 && merged[n-1].Last+1 == e.First && merged[n-1].Reason == e.Reason {
			merged[n-1].Last = e.Last
			continue
		}
		merged = append(merged, e)
	}
	m.gaps = merged
	if len(m.gaps) > maxPendingGaps {
		m.gaps[1].First = m.gaps[0].First
		m.gaps = append(m.gaps[:0], m.gaps[1:]...)
	}
	return added
}

// trimGaps forgets gaps wholly at or below upTo (the hub has heard of them).
func (m *meta) trimGaps(upTo uint64) {
	i := 0
	for i < len(m.gaps) && m.gaps[i].Last <= upTo {
		i++
	}
	m.gaps = append(m.gaps[:0], m.gaps[i:]...)
}
