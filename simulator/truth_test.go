package simulator

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"
)

func TestNearBoundary(t *testing.T) {
	res, guard := 10*time.Second, 100*time.Millisecond
	for _, c := range []struct {
		t    time.Duration
		near bool
	}{{0, true}, {50 * time.Millisecond, true}, {100 * time.Millisecond, false}, {5 * time.Second, false},
		{9900 * time.Millisecond, true}, {9899 * time.Millisecond, false}, {-50 * time.Millisecond, true}, {-5 * time.Second, false}} {
		if got := nearBoundary(int64(c.t), res, guard); got != c.near {
			t.Errorf("nearBoundary(%v) = %v", c.t, got)
		}
	}
}

// truthOf builds a one-device truth from (seconds, value) events of metric m.
func truthOf(dev string, events [][2]float64) *Truth {
	d := &DeviceTruth{Device: dev, Buckets: map[BucketKey]*Agg{}}
	for _, e := range events {
		d.add("m", int64(e[0]*1e9), e[1], 10*time.Second)
		d.Appended++
	}
	return &Truth{Resolution: 10 * time.Second, Metrics: []string{"m"}, Devices: []*DeviceTruth{d}}
}

func TestExpectedTumblingAndHopping(t *testing.T) {
	tr := truthOf("d1", [][2]float64{{1, 1}, {9, 2}, {11, 4}, {25, -1}, {59, 8}, {61, 16}})
	tum, _ := ParseWindow("tumbling:10s", tr.Resolution)
	exp, unver := tr.Expected(tum, "m")
	if len(unver) != 0 {
		t.Fatalf("unverifiable %v", unver)
	}
	want := map[int64]Agg{0: {2, 3, 1, 2}, 10: {1, 4, 4, 4}, 20: {1, -1, -1, -1}, 50: {1, 8, 8, 8}, 60: {1, 16, 16, 16}}
	if len(exp) != len(want) {
		t.Fatalf("tumbling:10s %v", exp)
	}
	for s, w := range want {
		if g := exp[WindowKey{"d1", s * 1e9}]; g != w {
			t.Errorf("tumbling:10s at %ds = %+v, want %+v", s, g, w)
		}
	}
	min1, _ := ParseWindow("tumbling:1m", tr.Resolution)
	exp, _ = tr.Expected(min1, "m")
	if g := exp[WindowKey{"d1", 0}]; g != (Agg{5, 14, -1, 8}) || exp[WindowKey{"d1", 60e9}] != (Agg{1, 16, 16, 16}) || len(exp) != 2 {
		t.Errorf("tumbling:1m %v", exp)
	}
	hop, _ := ParseWindow("hopping:30s/10s", tr.Resolution)
	exp, _ = tr.Expected(hop, "m")
	// Windows [s, s+30s) for s multiple of 10s: the event at 25 s is in
	// the windows starting at 0, 10 and 20 s.
	checks := map[int64]Agg{-20: {2, 3, 1, 2}, -10: {3, 7, 1, 4}, 0: {4, 6, -1, 4}, 10: {2, 3, -1, 4}, 20: {1, -1, -1, -1},
		30: {1, 8, 8, 8}, 40: {2, 24, 8, 16}, 50: {2, 24, 8, 16}, 60: {1, 16, 16, 16}}
	for s, w := range checks {
		if g := exp[WindowKey{"d1", s * 1e9}]; g != w {
			t.Errorf("hopping at %ds = %+v, want %+v", s, g, w)
		}
	}
	if len(exp) != len(checks) {
		t.Errorf("hopping: %d windows, want %d", len(exp), len(checks))
	}
}

func TestExpectedSkipsUncertainDevices(t *testing.T) {
	tr := truthOf("d1", [][2]float64{{1, 1}})
	tr.Devices[0].Uncertain = 1
	w, _ := ParseWindow("tumbling:10s", tr.Resolution)
	exp, unver := tr.Expected(w, "m")
	if len(exp) != 0 || len(unver) != 1 {
		t.Errorf("expected %v unverifiable %v", exp, unver)
	}
}

func TestTruthSaveLoad(t *testing.T) {
	tr := truthOf("d1", [][2]float64{{1, 1}, {15, 2}})
	tr.Devices[0].Samples = []TimeSample{{Seq: 1, TrueNs: 1e9}}
	var buf bytes.Buffer
	if err := tr.Save(&buf); err != nil {
		t.Fatal(err)
	}
	got, err := LoadTruth(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if got.Events() != 2 || len(got.Devices[0].Buckets) != 2 || got.Devices[0].Samples[0].TrueNs != 1e9 {
		t.Errorf("round trip lost data: %+v", got.Devices[0])
	}
}

func TestHistogram(t *testing.T) {
	var h Histogram
	for i := 1; i <= 100; i++ {
		h.Observe(time.Duration(i)*time.Millisecond, 1)
	}
	q := h.Summary()
	if q.Count != 100 || q.MaxMs != 100 {
		t.Fatalf("%+v", q)
	}
	if q.P50Ms < 47 || q.P50Ms > 53 || q.P99Ms < 94 || q.P99Ms > 100 {
		t.Errorf("quantiles %+v: want p50 ~50, p99 ~99 within 5%%", q)
	}
}

func TestHistogramSince(t *testing.T) {
	var h Histogram
	q, prev := h.since(histCounts{})
	if q.Count != 0 || q.MaxMs != 0 {
		t.Fatalf("empty: %+v", q)
	}
	for i := 1; i <= 100; i++ {
		h.Observe(time.Second, 1)
	}
	_, prev = h.since(prev)
	for i := 1; i <= 100; i++ {
		h.Observe(time.Duration(i)*time.Millisecond, 1)
	}
	// Only the second hundred, with its own max (a bucket bound within 5%).
	q, prev = h.since(prev)
	if q.Count != 100 || q.MaxMs < 100 || q.MaxMs > 105 || q.P50Ms < 47 || q.P50Ms > 53 || q.P99Ms < 94 || q.P99Ms > 105 {
		t.Errorf("interval %+v: want 100 observations, p50 ~50, p99 ~99, max ~100", q)
	}
	if q, _ := h.since(prev); q.Count != 0 {
		t.Errorf("nothing observed since, got %+v", q)
	}
	if all := h.Summary(); all.Count != 200 || all.MaxMs != 1000 {
		t.Errorf("whole histogram %+v", all)
	}
}

func TestValueShapes(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	for _, shape := range []string{ShapeSine, ShapeWalk, ShapeUniform, ShapeConstant, ShapeCounter} {
		spec := &MetricSpec{Name: "m", Rate: 10, Shape: shape, Min: 5, Max: 10, Period: time.Minute}
		g := newValueGen(spec, newRand(1), start)
		prev := 0.0
		for i := range 100 {
			v := g.value(start.Add(time.Duration(i) * 100 * time.Millisecond))
			if shape != ShapeCounter && (v < 5 || v > 10) {
				t.Fatalf("%s value %v outside [5, 10]", shape, v)
			}
			if shape == ShapeCounter && v <= prev {
				t.Fatalf("counter went from %v to %v", prev, v)
			}
			prev = v
		}
		if n := g.due(start.Add(10 * time.Second)); n < 99 || n > 101 {
			t.Errorf("%s: %d events due in 10 s at 10/s", shape, n)
		}
	}
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed)) }

// A device's pass does its per-event work (clock correction, encoding)
// only when one of its generators has an event due.
func TestAnyDue(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	spec := &MetricSpec{Name: "temp", Rate: 1, Shape: ShapeConstant, Min: 1, Max: 1}
	a := newValueGen(spec, rand.New(rand.NewPCG(1, 2)), start)
	b := newValueGen(spec, rand.New(rand.NewPCG(3, 4)), start)
	d := &device{gens: []*valueGen{a, b}}
	first := a.next
	if b.next.Before(first) {
		first = b.next
	}
	if d.anyDue(first.Add(-time.Nanosecond)) {
		t.Fatal("due before either generator's next event")
	}
	if !d.anyDue(first) {
		t.Fatal("not due at the first generator's next event")
	}
	a.due(start.Add(time.Hour))
	b.due(start.Add(time.Hour))
	if d.anyDue(start.Add(time.Hour)) {
		t.Fatal("due again after every due event was taken")
	}
}
