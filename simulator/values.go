package simulator

import (
	"math"
	"math/rand/v2"
	"time"
)

// valueGen produces one metric's values and capture times for one device.
type valueGen struct {
	spec   *MetricSpec
	rng    *rand.Rand
	every  time.Duration // 1/rate
	next   time.Time     // true time the next event is due
	phase  float64
	walk   float64
	counts float64
}

func newValueGen(spec *MetricSpec, rng *rand.Rand, start time.Time) *valueGen {
	every := time.Duration(float64(time.Second) / spec.Rate)
	g := &valueGen{spec: spec, rng: rng, every: every, phase: rng.Float64() * 2 * math.Pi}
	g.walk = spec.Min + rng.Float64()*(spec.Max-spec.Min)
	// Desynchronise devices: the first event falls anywhere in one interval.
	g.next = start.Add(time.Duration(rng.Int64N(int64(every) + 1)))
	return g
}

// value is the metric's value at true time t. Values are rounded to
// 1/1024 so that sums are exact in float64 for moderate counts.
func (g *valueGen) value(t time.Time) float64 {
	s := g.spec
	var v float64
	switch s.Shape {
	case ShapeSine:
		mid, amp := (s.Max+s.Min)/2, (s.Max-s.Min)/2
		v = mid + amp*math.Sin(2*math.Pi*float64(t.UnixNano()%int64(s.Period))/float64(s.Period)+g.phase)
	case ShapeWalk:
		step := (s.Max - s.Min) / 50
		g.walk = min(s.Max, max(s.Min, g.walk+(g.rng.Float64()*2-1)*step))
		v = g.walk
	case ShapeUniform:
		v = s.Min + g.rng.Float64()*(s.Max-s.Min)
	case ShapeConstant:
		v = s.Min
	case ShapeCounter:
		g.counts += max(s.Max, 1)
		v = s.Min + g.counts
	}
	return math.Round(v*1024) / 1024
}

// due returns how many events are due at true time now and advances the
// schedule past them.
func (g *valueGen) due(now time.Time) int {
	n := 0
	for !g.next.After(now) {
		n++
		g.next = g.next.Add(g.every)
	}
	return n
}

// skip drops the events due by now (the agent could not capture them).
func (g *valueGen) skip(now time.Time) {
	if g.next.Before(now) {
		g.next = now.Add(g.every)
	}
}
