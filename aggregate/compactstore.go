package aggregate

import (
	"errors"
	"slices"

	enc "github.com/DataDog/sketches-go/ddsketch/encoding"
	"github.com/DataDog/sketches-go/ddsketch/pb/sketchpb"
	"github.com/DataDog/sketches-go/ddsketch/store"
)

// compactBins is how many distinct bins a compactStore keeps as a sorted
// list before it turns into a dense store.
const compactBins = 32

// compactStore is a DDSketch bin store that answers exactly as
// store.CollapsingLowestDenseStore with the same bound, at a fraction of
// its memory while it holds few distinct bins. A dense store allocates at
// least 64 bins (512 bytes) on its first value and usually grows past a
// kilobyte; a partial of one series over 10 s holds a handful of distinct
// values, and a hub holds hundreds of thousands of live partials (every
// series' last evict_after), so the dense stores were most of its heap
// and of its allocation while a fleet caught up.
//
// It keeps the non-empty bins as a list sorted by index until it would
// hold more than compactBins of them or span more than maxBins indexes
// (where the dense store would start collapsing); then it moves them into
// a CollapsingLowestDenseStore and delegates to it from then on. Every bin
// added before the move is replayed into the dense store, and collapsing
// is order independent, so the state is the one the dense store would
// have had all along: the same quantiles, merges and encoding.
type compactStore struct {
	bins    []compactBin // ascending index, counts > 0; nil once dense
	total   float64
	maxBins int
	dense   *store.CollapsingLowestDenseStore // set once the bins outgrew the list
	// keepDense makes Clear keep a dense store (emptied) rather than go
	// back to the list: a query's scratch sketch, merged into and cleared
	// for every window, reuses its bins instead of allocating them anew.
	// A dense store from the start answers as one reached through the
	// list, so this changes no result.
	keepDense bool
}

type compactBin struct {
	index int
	count float64
}

func newCompactStore(maxBins int) *compactStore { return &compactStore{maxBins: maxBins} }

func (s *compactStore) Add(index int) { s.AddWithCount(index, 1) }

func (s *compactStore) AddBin(bin store.Bin) { s.AddWithCount(bin.Index(), bin.Count()) }

func (s *compactStore) AddWithCount(index int, count float64) {
	if s.dense != nil {
		s.dense.AddWithCount(index, count)
		return
	}
	if count == 0 {
		return
	}
	i, found := s.search(index)
	if found {
		s.bins[i].count += count
		s.total += count
		return
	}
	if len(s.bins) >= compactBins || (len(s.bins) > 0 && max(index, s.bins[len(s.bins)-1].index)-min(index, s.bins[0].index) >= s.maxBins) {
		s.toDense()
		s.dense.AddWithCount(index, count)
		return
	}
	s.bins = slices.Insert(s.bins, i, compactBin{index, count})
	s.total += count
}

// search finds index in the sorted bins (values of one bucket cluster, so
// the list is short: a linear scan from the top beats a binary search).
func (s *compactStore) search(index int) (int, bool) {
	i := len(s.bins)
	for i > 0 && s.bins[i-1].index >= index {
		i--
	}
	return i, i < len(s.bins) && s.bins[i].index == index
}

// toDense moves the bins into a collapsing dense store.
func (s *compactStore) toDense() {
	d := store.NewCollapsingLowestDenseStore(s.maxBins)
	for _, b := range s.bins {
		d.AddWithCount(b.index, b.count)
	}
	s.dense, s.bins, s.total = d, nil, 0
}

func (s *compactStore) Bins() <-chan store.Bin {
	if s.dense != nil {
		return s.dense.Bins()
	}
	ch := make(chan store.Bin)
	bins := slices.Clone(s.bins)
	go func() {
		defer close(ch)
		for _, b := range bins {
			if bin, err := store.NewBin(b.index, b.count); err == nil {
				ch <- *bin
			}
		}
	}()
	return ch
}

// ForEach calls f for the non-empty bins in ascending index order until f
// returns true. It only reads, so queries may call it concurrently.
func (s *compactStore) ForEach(f func(index int, count float64) (stop bool)) {
	if s.dense != nil {
		s.dense.ForEach(f)
		return
	}
	for _, b := range s.bins {
		if f(b.index, b.count) {
			return
		}
	}
}

func (s *compactStore) Copy() store.Store {
	if s.dense != nil {
		return &compactStore{maxBins: s.maxBins, dense: s.dense.Copy().(*store.CollapsingLowestDenseStore)}
	}
	return &compactStore{bins: slices.Clone(s.bins), total: s.total, maxBins: s.maxBins}
}

// Clear empties the store; a dense one goes back to the list unless
// keepDense.
func (s *compactStore) Clear() {
	if s.keepDense && s.dense != nil {
		s.dense.Clear()
		return
	}
	s.bins, s.total, s.dense = s.bins[:0], 0, nil
}

func (s *compactStore) IsEmpty() bool {
	if s.dense != nil {
		return s.dense.IsEmpty()
	}
	return s.total == 0
}

func (s *compactStore) MaxIndex() (int, error) {
	if s.dense != nil {
		return s.dense.MaxIndex()
	}
	if s.IsEmpty() {
		return 0, errEmptyStore
	}
	return s.bins[len(s.bins)-1].index, nil
}

func (s *compactStore) MinIndex() (int, error) {
	if s.dense != nil {
		return s.dense.MinIndex()
	}
	if s.IsEmpty() {
		return 0, errEmptyStore
	}
	return s.bins[0].index, nil
}

func (s *compactStore) TotalCount() float64 {
	if s.dense != nil {
		return s.dense.TotalCount()
	}
	return s.total
}

// KeyAtRank returns the index of the bin holding the value of the given
// rank (0-based), as the dense store does.
func (s *compactStore) KeyAtRank(rank float64) int {
	if s.dense != nil {
		return s.dense.KeyAtRank(rank)
	}
	rank = max(rank, 0)
	var n float64
	for _, b := range s.bins {
		if n += b.count; n > rank {
			return b.index
		}
	}
	if len(s.bins) == 0 {
		return 0
	}
	return s.bins[len(s.bins)-1].index
}

func (s *compactStore) MergeWith(other store.Store) {
	if o, ok := other.(*compactStore); ok && o.dense == nil {
		for _, b := range o.bins {
			s.AddWithCount(b.index, b.count)
		}
		return
	}
	other.ForEach(func(index int, count float64) bool {
		s.AddWithCount(index, count)
		return false
	})
}

// asDense returns the store's content as a dense store (for the rarely
// used protobuf conversions).
func (s *compactStore) asDense() *store.CollapsingLowestDenseStore {
	if s.dense != nil {
		return s.dense
	}
	d := store.NewCollapsingLowestDenseStore(s.maxBins)
	for _, b := range s.bins {
		d.AddWithCount(b.index, b.count)
	}
	return d
}

func (s *compactStore) ToProto() *sketchpb.Store { return s.asDense().ToProto() }

func (s *compactStore) EncodeProto(builder *sketchpb.StoreBuilder) { s.asDense().EncodeProto(builder) }

func (s *compactStore) Reweight(w float64) error {
	if s.dense != nil {
		return s.dense.Reweight(w)
	}
	if w <= 0 {
		return errors.New("can't reweight by a negative factor")
	}
	if w == 1 {
		return nil
	}
	s.total *= w
	for i := range s.bins {
		s.bins[i].count *= w
	}
	return nil
}

// Encode appends the bins exactly as the dense store encodes the same
// bins: contiguous counts or index deltas, whichever is shorter.
func (s *compactStore) Encode(b *[]byte, t enc.FlagType) {
	if s.dense != nil {
		s.dense.Encode(b, t)
		return
	}
	if s.IsEmpty() {
		return
	}
	lo, hi := s.bins[0].index, s.bins[len(s.bins)-1].index
	numBins := uint64(hi-lo) + 1
	dense := enc.Uvarint64Size(numBins) + enc.Varint64Size(int64(lo)) + enc.Varint64Size(1)
	dense += (int(numBins) - len(s.bins)) * enc.Varfloat64Size(0) // the empty bins between
	sparse, prev := 0, lo
	for _, bin := range s.bins {
		size := enc.Varfloat64Size(bin.count)
		dense += size
		sparse += enc.Varint64Size(int64(bin.index-prev)) + size
		prev = bin.index
	}
	sparse += enc.Uvarint64Size(uint64(len(s.bins)))
	if dense <= sparse {
		enc.EncodeFlag(b, enc.NewFlag(t, enc.BinEncodingContiguousCounts))
		enc.EncodeUvarint64(b, numBins)
		enc.EncodeVarint64(b, int64(lo))
		enc.EncodeVarint64(b, 1)
		next := lo
		for _, bin := range s.bins {
			for ; next < bin.index; next++ {
				enc.EncodeVarfloat64(b, 0)
			}
			enc.EncodeVarfloat64(b, bin.count)
			next++
		}
		return
	}
	enc.EncodeFlag(b, enc.NewFlag(t, enc.BinEncodingIndexDeltasAndCounts))
	enc.EncodeUvarint64(b, uint64(len(s.bins)))
	prev = 0
	for _, bin := range s.bins {
		enc.EncodeVarint64(b, int64(bin.index-prev))
		enc.EncodeVarfloat64(b, bin.count)
		prev = bin.index
	}
}

func (s *compactStore) DecodeAndMergeWith(b *[]byte, mode enc.SubFlag) error {
	return store.DecodeAndMergeWith(s, b, mode)
}

var _ store.Store = (*compactStore)(nil)
