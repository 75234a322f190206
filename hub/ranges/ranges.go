package ranges

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
)

// SeqRange is a closed range of sequence numbers [First, Last].
type SeqRange struct {
	First uint64 `json:"first"`
	Last  uint64 `json:"last"`
}

// Len returns how many sequence numbers r holds.
func (r SeqRange) Len() uint64 { return r.Last - r.First + 1 }

// RangeSet is a compact set of sequence numbers: sorted, disjoint,
// non-adjacent closed ranges. A stream that is delivered in order holds a
// single range however many batches it sent. The zero value is empty.
type RangeSet struct {
	r []SeqRange
}

// Ranges returns the ranges in ascending order. The slice is shared; do not
// modify it.
func (s *RangeSet) Ranges() []SeqRange { return s.r }

// Len returns the number of disjoint ranges.
func (s *RangeSet) Len() int { return len(s.r) }

// Max returns the largest member, or 0 if the set is empty.
func (s *RangeSet) Max() uint64 {
	if len(s.r) == 0 {
		return 0
	}
	return s.r[len(s.r)-1].Last
}

// Count returns how many sequence numbers the set holds.
func (s *RangeSet) Count() uint64 {
	var n uint64
	for _, r := range s.r {
		n += r.Len()
	}
	return n
}

// Clone returns an independent copy.
func (s *RangeSet) Clone() RangeSet {
	return RangeSet{r: append([]SeqRange(nil), s.r...)}
}

// search returns the index of the first range whose Last+1 >= seq (seq >=
// 1), that is the first range that holds seq, touches it, or lies after it.
func (s *RangeSet) search(seq uint64) int {
	return sort.Search(len(s.r), func(i int) bool { return s.r[i].Last >= seq-1 })
}

// Covers reports whether every number of [first, last] is in the set.
func (s *RangeSet) Covers(first, last uint64) bool {
	i := sort.Search(len(s.r), func(i int) bool { return s.r[i].Last >= first })
	return i < len(s.r) && s.r[i].First <= first && s.r[i].Last >= last
}

// Missing appends to dst the parts of [first, last] that are not in the set,
// in ascending order, and returns it.
func (s *RangeSet) Missing(dst []SeqRange, first, last uint64) []SeqRange {
	i := sort.Search(len(s.r), func(i int) bool { return s.r[i].Last >= first })
	next := first
	for ; i < len(s.r) && s.r[i].First <= last; i++ {
		if s.r[i].First > next {
			dst = append(dst, SeqRange{next, s.r[i].First - 1})
		}
		if s.r[i].Last >= last {
			return dst
		}
		next = s.r[i].Last + 1
	}
	return append(dst, SeqRange{next, last})
}

// Add inserts [first, last] (first <= last) and returns how many numbers
// were not in the set before.
func (s *RangeSet) Add(first, last uint64) uint64 {
	before := s.Count()
	i := 0
	if first > 0 {
		i = s.search(first)
	}
	j := i
	nf, nl := first, last
	for j < len(s.r) && (last == ^uint64(0) || s.r[j].First <= last+1) {
		nf = min(nf, s.r[j].First)
		nl = max(nl, s.r[j].Last)
		j++
	}
	switch {
	case i == j:
		s.r = append(s.r, SeqRange{})
		copy(s.r[i+1:], s.r[i:])
		s.r[i] = SeqRange{nf, nl}
	default:
		s.r[i] = SeqRange{nf, nl}
		s.r = append(s.r[:i+1], s.r[j:]...)
	}
	return s.Count() - before
}

// AppendBinary appends a compact encoding of the set: the number of ranges,
// then each range as the delta from the previous range's end and its length,
// all as unsigned varints.
func (s *RangeSet) AppendBinary(b []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(s.r)))
	var prev uint64
	for _, r := range s.r {
		b = binary.AppendUvarint(b, r.First-prev)
		b = binary.AppendUvarint(b, r.Last-r.First)
		prev = r.Last
	}
	return b
}

// errRangeSet reports a corrupt range set encoding.
var errRangeSet = errors.New("corrupt range set")

// DecodeRangeSet parses what AppendBinary wrote and returns the rest of b.
func DecodeRangeSet(b []byte) (RangeSet, []byte, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return RangeSet{}, nil, fmt.Errorf("%w: bad count", errRangeSet)
	}
	b = b[k:]
	s := RangeSet{r: make([]SeqRange, 0, n)}
	var prev uint64
	for i := uint64(0); i < n; i++ {
		d, k1 := binary.Uvarint(b)
		if k1 <= 0 {
			return RangeSet{}, nil, fmt.Errorf("%w: range %d", errRangeSet, i)
		}
		l, k2 := binary.Uvarint(b[k1:])
		if k2 <= 0 {
			return RangeSet{}, nil, fmt.Errorf("%w: range %d", errRangeSet, i)
		}
		b = b[k1+k2:]
		first := prev + d
		if (i > 0 && d < 2) || first < prev || first+l < first || first == 0 {
			return RangeSet{}, nil, fmt.Errorf("%w: range %d out of order", errRangeSet, i)
		}
		s.r = append(s.r, SeqRange{first, first + l})
		prev = first + l
	}
	return s, b, nil
}

// MarshalJSON writes the ranges as [[first,last],...].
func (s RangeSet) MarshalJSON() ([]byte, error) {
	out := make([][2]uint64, len(s.r))
	for i, r := range s.r {
		out[i] = [2]uint64{r.First, r.Last}
	}
	return json.Marshal(out)
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (s *RangeSet) UnmarshalJSON(b []byte) error {
	var in [][2]uint64
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	*s = RangeSet{}
	for _, r := range in {
		if r[0] == 0 || r[0] > r[1] {
			return fmt.Errorf("range [%d, %d] is empty or starts at 0", r[0], r[1])
		}
		s.Add(r[0], r[1])
	}
	return nil
}
