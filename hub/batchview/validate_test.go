package batchview

import (
	"math"
	"math/rand/v2"
	"testing"

	"edgeflow/hub/internal/hubtest"
	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// TestColumnsValid holds the column-at-a-time check to checkEvent event
// by event: over columns with every kind of fault checkEvent knows (a NaN
// or infinite value, an empty metric, a method out of range or one that
// only truncates into range, a negative uncertainty, a trusted time
// outside the sane years, an untrusted one that may be) at random places,
// columnsValid must say true exactly when every event passes.
func TestColumnsValid(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	good := wirepb.TimeMethod_TIME_METHOD_NTP
	faults := []func(c *wire.Columns, i int){
		func(c *wire.Columns, i int) { c.Value[i] = math.NaN() },
		func(c *wire.Columns, i int) { c.Value[i] = math.Inf(1 - 2*rng.IntN(2)) },
		func(c *wire.Columns, i int) { c.Metric[i] = 0 }, // the empty string
		func(c *wire.Columns, i int) { c.Method[i] = uint64(MaxMethod) + 1 },
		func(c *wire.Columns, i int) { c.Method[i] = math.MaxUint64 },                         // -1 as int32
		func(c *wire.Columns, i int) { c.Method[i] = 1<<32 + uint64(good) },                   // truncates to NTP: passes
		func(c *wire.Columns, i int) { c.Uncertainty[i] = -1 - rng.Int64N(1e9) },              // negative
		func(c *wire.Columns, i int) { c.Time[i] = 5 },                                        // 1970, trusted
		func(c *wire.Columns, i int) { c.Time[i], c.Offset[i] = 5, c.Time[i]-5 },              // repaired: passes
		func(c *wire.Columns, i int) { c.Time[i], c.Offset[i] = math.MinInt64+1e18, -7.1e18 }, // wraps into range
		func(c *wire.Columns, i int) {
			c.Time[i], c.Method[i] = 5, uint64(wirepb.TimeMethod_TIME_METHOD_UNTRUSTED) // passes
		},
		func(c *wire.Columns, i int) { c.Time[i] = MaxTimeNs }, // 2200: out
	}
	passes, fails := 0, 0
	for round := range 3000 {
		n := 1 + rng.IntN(20)
		c := &wire.Columns{Strings: [][]byte{nil, []byte("temp"), []byte("rh")}}
		if rng.IntN(2) == 0 { // no empty string in the table at all
			c.Strings[0] = []byte("co2")
		}
		for range n {
			c.Value = append(c.Value, rng.NormFloat64()*100)
			c.Metric = append(c.Metric, uint32(1+rng.IntN(2)))
			c.Method = append(c.Method, uint64(good))
			c.Uncertainty = append(c.Uncertainty, rng.Int64N(1e6))
			c.Time = append(c.Time, hubtest.BaseTimeNs+rng.Int64N(1e12))
			c.Offset = append(c.Offset, rng.Int64N(2e9)-1e9)
		}
		for range rng.IntN(3) {
			faults[rng.IntN(len(faults))](c, rng.IntN(n))
		}
		want := true
		for i := range n {
			m := wirepb.TimeMethod(int32(c.Method[i]))
			if CheckEvent(c.Value[i], len(c.Strings[c.Metric[i]]), m, c.Uncertainty[i], c.Time[i], c.Offset[i]) != wire.FaultNone {
				want = false
			}
		}
		if got := ColumnsValid(c); got != want {
			t.Fatalf("round %d: columnsValid %v, checkEvent says %v for %+v", round, got, want, c)
		}
		if want {
			passes++
		} else {
			fails++
		}
	}
	if passes < 500 || fails < 500 {
		t.Fatalf("%d batches pass and %d fail: the test needs both", passes, fails)
	}
}
