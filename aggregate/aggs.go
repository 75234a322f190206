package aggregate

import (
	"math"
	"strings"

	"github.com/DataDog/sketches-go/ddsketch"
)

// Aggs is a set of aggregates a query asks for; the zero value means all.
type Aggs uint16

// Aggregates.
const (
	AggCount Aggs = 1 << iota
	AggSum
	AggMin
	AggMax
	AggAvg
	AggLast
	AggP50
	AggP95
	AggP99
	// AllAggs is every aggregate.
	AllAggs = AggCount | AggSum | AggMin | AggMax | AggAvg | AggLast | AggP50 | AggP95 | AggP99
)

var aggNames = []struct {
	name string
	agg  Aggs
}{
	{"count", AggCount}, {"sum", AggSum}, {"min", AggMin}, {"max", AggMax}, {"avg", AggAvg},
	{"last", AggLast}, {"p50", AggP50}, {"p95", AggP95}, {"p99", AggP99},
}

// ParseAggs parses aggregate names (count, sum, min, max, avg, last, p50,
// p95, p99); none means all. An unknown name is a *ParamError for aggs.
func ParseAggs(names []string) (Aggs, error) {
	var a Aggs
	for _, n := range names {
		found := false
		for _, an := range aggNames {
			if strings.EqualFold(strings.TrimSpace(n), an.name) {
				a |= an.agg
				found = true
			}
		}
		if !found {
			return 0, paramErr("aggs", "unknown aggregate %q (want count, sum, min, max, avg, last, p50, p95, p99)", n)
		}
	}
	if a == 0 {
		a = AllAggs
	}
	return a, nil
}

// Names lists the aggregates in a, in canonical order.
func (a Aggs) Names() []string {
	var out []string
	for _, an := range aggNames {
		if a&an.agg != 0 {
			out = append(out, an.name)
		}
	}
	return out
}

// Has reports whether a includes every aggregate of x.
func (a Aggs) Has(x Aggs) bool { return a&x == x }

func (a Aggs) quantiles() bool { return a&(AggP50|AggP95|AggP99) != 0 }

// merge folds src into dst. Sketches are shared until a second source
// arrives (copy on write), so a one-bucket window copies nothing.
func (e *Engine) merge(dst, src *partial, sketch bool) {
	if src.count == 0 {
		return
	}
	if dst.count == 0 {
		bucket := dst.bucket
		*dst = *src
		dst.bucket, dst.shared, dst.guard = bucket, true, 0
		dst.late = src.late[:len(src.late):len(src.late)]
		if !sketch {
			dst.sk = nil
		}
		return
	}
	dst.q = nil // stored quantiles describe one partial, not a merge
	dst.count += src.count
	dst.addSum(src.sum)
	dst.comp += src.comp
	dst.min, dst.max = math.Min(dst.min, src.min), math.Max(dst.max, src.max)
	dst.firstT = min(dst.firstT, src.firstT)
	if e.lastLess(lastKey{dst.lastT, dst.lastStream, dst.lastSeq}, lastKey{src.lastT, src.lastStream, src.lastSeq}) {
		dst.lastT, dst.lastV, dst.lastStream, dst.lastSeq = src.lastT, src.lastV, src.lastStream, src.lastSeq
	}
	if len(src.late) > 0 {
		dst.late = append(dst.late, src.late...)
	}
	if sketch && src.sk != nil {
		if dst.shared || dst.sk == nil {
			if dst.sk == nil {
				dst.sk = e.sks.fresh()
			} else {
				dst.sk = dst.sk.Copy()
			}
			dst.shared = false
		}
		_ = dst.sk.MergeWith(src.sk) // same mapping, cannot fail
	}
}

// quantiles returns the values at ranks 0.5, 0.95 and 0.99 of sk, each
// clamped to the exact [lo, hi]. Without negative values it makes one pass
// over the bins instead of one per quantile.
func quantiles(sk *ddsketch.DDSketch, lo, hi float64) (p50, p95, p99 float64) {
	count := sk.GetCount()
	if count == 0 {
		return 0, 0, 0
	}
	var w rankWalk
	if !sk.GetNegativeValueStore().IsEmpty() {
		for i, q := range rankQs {
			w.out[i], _ = sk.GetValueAtQuantile(q)
		}
	} else {
		w = rankWalk{sk: sk, count: count, cum: sk.GetZeroCount()}
		for w.i < 3 && rankQs[w.i]*(count-1) < w.cum {
			w.i++ // out[i] stays 0
		}
		// The concrete store's ForEach with a closure that does not escape:
		// no allocation per call (quantiles run once per window of a query).
		if ds, ok := sk.GetPositiveValueStore().(*compactStore); ok {
			ds.ForEach(func(index int, c float64) bool { return w.step(index, c) })
		} else {
			w2 := w
			sk.GetPositiveValueStore().ForEach(func(index int, c float64) bool { return w2.step(index, c) })
			w = w2
		}
	}
	for i := range w.out {
		w.out[i] = min(max(w.out[i], lo), hi) // exact bounds only shrink the error
	}
	return w.out[0], w.out[1], w.out[2]
}

// rankQs are the quantiles a WindowResult reports.
var rankQs = [3]float64{0.5, 0.95, 0.99}

// rankWalk finds the values at rankQs in one ascending pass over bins.
type rankWalk struct {
	sk         *ddsketch.DDSketch
	count, cum float64
	i          int
	out        [3]float64
}

func (w *rankWalk) step(index int, c float64) bool {
	w.cum += c
	for w.i < 3 && rankQs[w.i]*(w.count-1) < w.cum {
		w.out[w.i] = w.sk.Value(index)
		w.i++
	}
	return w.i == 3
}
