package simulator

import (
	"math"
	"sync/atomic"
	"time"
)

// histBuckets covers 100 ns to about 28 hours in steps of 5%.
const (
	histMin     = 100.0 // ns
	histGrowth  = 1.05
	histBuckets = 600
)

// Histogram is a lock-free histogram of durations with 5% relative
// resolution, shared by many goroutines.
type Histogram struct {
	counts [histBuckets + 1]atomic.Uint64
	max    atomic.Int64
}

func histIndex(ns float64) int {
	if ns <= histMin {
		return 0
	}
	i := int(math.Log(ns/histMin)/math.Log(histGrowth)) + 1
	return min(i, histBuckets)
}

// Observe records n observations of d (negative d counts as its absolute value).
func (h *Histogram) Observe(d time.Duration, n uint64) {
	if d < 0 {
		d = -d
	}
	if n == 0 {
		return
	}
	h.counts[histIndex(float64(d))].Add(n)
	for {
		m := h.max.Load()
		if int64(d) <= m || h.max.CompareAndSwap(m, int64(d)) {
			break
		}
	}
}

// Quantiles is a summary of a Histogram, in milliseconds.
type Quantiles struct {
	Count uint64  `json:"count"`
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
	MaxMs float64 `json:"max_ms"`
}

// histCounts is a copy of a Histogram's bucket counts.
type histCounts [histBuckets + 1]uint64

// counts copies the bucket counts; Observe may run meanwhile.
func (h *Histogram) snapshotCounts() histCounts {
	var c histCounts
	for i := range c {
		c[i] = h.counts[i].Load()
	}
	return c
}

// Summary returns p50, p99 and max (upper bucket bounds, within 5%).
func (h *Histogram) Summary() Quantiles {
	c := h.snapshotCounts()
	return c.summary(ms(time.Duration(h.max.Load())))
}

// since summarizes the observations made after prev (an earlier
// snapshotCounts of the same Histogram) and returns them with the current
// counts for the next call. Its max is the upper bound of the highest
// bucket observed.
func (h *Histogram) since(prev histCounts) (Quantiles, histCounts) {
	cur := h.snapshotCounts()
	var d histCounts
	top := -1
	for i := range d {
		d[i] = cur[i] - min(prev[i], cur[i])
		if d[i] > 0 {
			top = i
		}
	}
	if top < 0 {
		return Quantiles{}, cur
	}
	return d.summary(math.Min(bucketUpperMs(top), ms(time.Duration(h.max.Load())))), cur
}

// bucketUpperMs is the upper bound of bucket i in milliseconds.
func bucketUpperMs(i int) float64 { return histMin * math.Pow(histGrowth, float64(i)) / 1e6 }

// summary computes the quantiles of counts whose largest value is maxMs.
func (c *histCounts) summary(maxMs float64) Quantiles {
	var total uint64
	for _, n := range c {
		total += n
	}
	q := Quantiles{Count: total, MaxMs: maxMs}
	if total == 0 {
		return q
	}
	at := func(p float64) float64 {
		rank := uint64(math.Ceil(p * float64(total)))
		var seen uint64
		for i, n := range c {
			seen += n
			if seen >= rank {
				return math.Min(bucketUpperMs(i), q.MaxMs)
			}
		}
		return q.MaxMs
	}
	q.P50Ms, q.P99Ms = at(0.50), at(0.99)
	return q
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }
