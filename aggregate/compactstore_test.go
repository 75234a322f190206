package aggregate

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	enc "github.com/DataDog/sketches-go/ddsketch/encoding"
	"github.com/DataDog/sketches-go/ddsketch/store"
	"google.golang.org/protobuf/proto"
)

// TestCompactStoreMatchesDense: a compactStore answers exactly as the
// CollapsingLowestDenseStore it stands in for, with the same bound, under
// random adds (few and many distinct bins, narrow and wide ranges, so it
// stays a list, outgrows it, or reaches the collapsing bound), merges in
// both directions, copies, clears, reweights and encode/decode round
// trips: the same bins, counts, indexes, ranks and bytes.
func TestCompactStoreMatchesDense(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for trial := 0; trial < 2000; trial++ {
		maxBins := []int{8, 40, 2048}[r.IntN(3)]
		c, d := newCompactStore(maxBins), store.NewCollapsingLowestDenseStore(maxBins)
		spread := []int{3, 20, 60, 5000}[r.IntN(4)]
		base := r.IntN(2000) - 1000
		for op := 0; op < 1+r.IntN(80); op++ {
			switch k := r.IntN(20); {
			case k < 15:
				i, n := base+r.IntN(spread), float64(1+r.IntN(3))
				if r.IntN(10) == 0 {
					n = 0
				}
				c.AddWithCount(i, n)
				d.AddWithCount(i, n)
			case k < 17: // merge another pair in
				c2, d2 := newCompactStore(maxBins), store.NewCollapsingLowestDenseStore(maxBins)
				for j := 0; j < r.IntN(40); j++ {
					i := base + r.IntN(spread)
					c2.Add(i)
					d2.Add(i)
				}
				if r.IntN(2) == 0 {
					c.MergeWith(c2)
				} else {
					c.MergeWith(d2) // a foreign store merges through ForEach
				}
				d.MergeWith(d2)
			case k == 17:
				cc := c.Copy()
				c = cc.(*compactStore)
				d = d.Copy().(*store.CollapsingLowestDenseStore)
			case k == 18:
				w := float64(1 + r.IntN(3))
				if err1, err2 := c.Reweight(w), d.Reweight(w); (err1 == nil) != (err2 == nil) {
					t.Fatalf("trial %d: reweight %v vs %v", trial, err1, err2)
				}
			default:
				if r.IntN(4) == 0 {
					c.Clear()
					d.Clear()
				}
			}
			if diff := diffStores(c, d); diff != "" {
				t.Fatalf("trial %d (max bins %d, spread %d), op %d: %s", trial, maxBins, spread, op, diff)
			}
		}
	}
}

func storeBins(s store.Store) [][2]float64 {
	var out [][2]float64
	s.ForEach(func(i int, n float64) bool { out = append(out, [2]float64{float64(i), n}); return false })
	return out
}

func diffStores(c *compactStore, d *store.CollapsingLowestDenseStore) string {
	if a, b := storeBins(c), storeBins(d); !slices.Equal(a, b) {
		return fmt.Sprintf("bins %v vs %v", a, b)
	}
	if c.IsEmpty() != d.IsEmpty() || c.TotalCount() != d.TotalCount() {
		return fmt.Sprintf("empty %v/%v total %v/%v", c.IsEmpty(), d.IsEmpty(), c.TotalCount(), d.TotalCount())
	}
	if d.IsEmpty() {
		return ""
	}
	cmin, _ := c.MinIndex()
	dmin, _ := d.MinIndex()
	cmax, _ := c.MaxIndex()
	dmax, _ := d.MaxIndex()
	if cmin != dmin || cmax != dmax {
		return fmt.Sprintf("min/max %d/%d vs %d/%d", cmin, cmax, dmin, dmax)
	}
	for rank := -1.0; rank <= d.TotalCount(); rank += 0.5 {
		if a, b := c.KeyAtRank(rank), d.KeyAtRank(rank); a != b {
			return fmt.Sprintf("key at rank %v: %d vs %d", rank, a, b)
		}
	}
	var cb, db []byte
	c.Encode(&cb, enc.FlagTypePositiveStore)
	d.Encode(&db, enc.FlagTypePositiveStore)
	if !bytes.Equal(cb, db) {
		return fmt.Sprintf("encoding %x vs %x", cb, db)
	}
	if !proto.Equal(c.ToProto(), d.ToProto()) {
		return "protobuf differs"
	}
	back := newCompactStore(c.maxBins)
	flag, err := enc.DecodeFlag(&cb)
	if err != nil {
		return fmt.Sprintf("decode flag: %v", err)
	}
	if err := back.DecodeAndMergeWith(&cb, flag.SubFlag()); err != nil {
		return fmt.Sprintf("decode: %v", err)
	}
	if a, b := storeBins(back), storeBins(d); !slices.Equal(a, b) {
		return fmt.Sprintf("decoded bins %v vs %v", a, b)
	}
	return ""
}

// TestCompactSketchesSmaller: the point of compactStore, measured: live
// partials of ten values each take a fraction of the heap dense stores
// took.
func TestCompactSketchesSmaller(t *testing.T) {
	sks, err := newSketches(0.01, 2048)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 1))
	var keep []any
	heap := func(f func()) uint64 {
		before := heapInUse()
		f()
		return heapInUse() - before
	}
	const n = 2000
	compact := heap(func() {
		for i := 0; i < n; i++ {
			sk := sks.fresh()
			for j := 0; j < 10; j++ {
				_ = sk.Add(15 + 10*r.Float64())
			}
			keep = append(keep, sk)
		}
	})
	dense := heap(func() {
		for i := 0; i < n; i++ {
			s := store.NewCollapsingLowestDenseStore(2048)
			for j := 0; j < 10; j++ {
				s.Add(sks.mapping.Index(15 + 10*r.Float64()))
			}
			keep = append(keep, s)
		}
	})
	t.Logf("10-value sketch: %d bytes with compact stores (whole sketch); %d bytes for a dense positive store alone", compact/n, dense/n)
	if compact >= dense {
		t.Fatalf("compact sketches (%d bytes) not smaller than dense stores alone (%d bytes)", compact/n, dense/n)
	}
	_ = keep
}

// heapInUse is the live heap after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
