package ranges

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestRangeSetAdd(t *testing.T) {
	tests := []struct {
		name string
		add  [][2]uint64
		want []SeqRange
	}{
		{"single", [][2]uint64{{1, 10}}, []SeqRange{{1, 10}}},
		{"adjacent merge", [][2]uint64{{1, 10}, {11, 20}}, []SeqRange{{1, 20}}},
		{"gap kept", [][2]uint64{{1, 10}, {12, 20}}, []SeqRange{{1, 10}, {12, 20}}},
		{"fill gap", [][2]uint64{{1, 10}, {12, 20}, {11, 11}}, []SeqRange{{1, 20}}},
		{"before", [][2]uint64{{10, 20}, {1, 5}}, []SeqRange{{1, 5}, {10, 20}}},
		{"span several", [][2]uint64{{1, 2}, {5, 6}, {9, 10}, {2, 9}}, []SeqRange{{1, 10}}},
		{"contained", [][2]uint64{{1, 100}, {20, 30}}, []SeqRange{{1, 100}}},
		{"top", [][2]uint64{{1, 1}, {^uint64(0) - 1, ^uint64(0) - 1}}, []SeqRange{{1, 1}, {^uint64(0) - 1, ^uint64(0) - 1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s RangeSet
			for _, a := range tt.add {
				s.Add(a[0], a[1])
			}
			if !slices.Equal(s.Ranges(), tt.want) {
				t.Fatalf("got %v, want %v", s.Ranges(), tt.want)
			}
		})
	}
}

// TestRangeSetModel checks Add, Covers, Missing and the encoding against a
// plain set of numbers.
func TestRangeSetModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 200; round++ {
		var s RangeSet
		model := map[uint64]bool{}
		for op := 0; op < 40; op++ {
			first := 1 + rng.Uint64N(200)
			last := first + rng.Uint64N(15)
			missing := s.Missing(nil, first, last)
			var wantMissing uint64
			for q := first; q <= last; q++ {
				if !model[q] {
					wantMissing++
				}
			}
			var gotMissing uint64
			for _, r := range missing {
				for q := r.First; q <= r.Last; q++ {
					if model[q] {
						t.Fatalf("Missing returned %d which is present", q)
					}
					gotMissing++
				}
			}
			if gotMissing != wantMissing {
				t.Fatalf("Missing(%d,%d) covers %d, want %d", first, last, gotMissing, wantMissing)
			}
			if s.Covers(first, last) != (wantMissing == 0) {
				t.Fatalf("Covers(%d,%d) = %v, missing %d", first, last, s.Covers(first, last), wantMissing)
			}
			if added := s.Add(first, last); added != wantMissing {
				t.Fatalf("Add returned %d, want %d", added, wantMissing)
			}
			for q := first; q <= last; q++ {
				model[q] = true
			}
			if s.Count() != uint64(len(model)) {
				t.Fatalf("Count %d, want %d", s.Count(), len(model))
			}
		}
		dec, rest, err := DecodeRangeSet(s.AppendBinary(nil))
		if err != nil || len(rest) != 0 || !slices.Equal(dec.Ranges(), s.Ranges()) {
			t.Fatalf("round trip: %v %v vs %v", err, dec.Ranges(), s.Ranges())
		}
	}
}
