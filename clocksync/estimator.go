package clocksync

import (
	"math"
	"slices"
	"strings"
	"time"

	"edgeflow/wire/wirepb"
)

// sample is one time measurement, as a point on the boot line: the true
// Unix time at which the monotonic clock read zero, as implied by one
// exchange, with a hard bound on its error for an honest source.
type sample struct {
	mono   time.Duration // monotonic midpoint of the exchange
	boot   int64         // true Unix ns minus mono ns at mono
	delay  time.Duration // round-trip delay
	bound  time.Duration // |boot - true boot| <= bound for an honest source
	source string
	method wirepb.TimeMethod
}

func (s sample) lo() int64 { return s.boot - int64(s.bound) }
func (s sample) hi() int64 { return s.boot + int64(s.bound) }

// minBound floors a sample's bound so one implausibly tight sample cannot
// dominate the weighted fit.
const minBound = time.Microsecond

// minDriftSpan is the time the fitted samples must span before the drift
// is estimated rather than bounded by MaxDriftPPM.
const minDriftSpan = time.Minute

// model is an immutable fit of the boot line, shared through an atomic
// pointer so that stamping an event never takes a lock.
type model struct {
	refMono    time.Duration
	refBoot    int64   // fitted boot at refMono
	drift      float64 // d(boot)/d(mono), dimensionless
	driftKnown bool
	rho        float64 // uncertainty growth per unit of monotonic distance
	pts        []upoint
	firstMono  time.Duration
	lastMono   time.Duration
	uLast      float64 // uncertainty at lastMono, ns
	method     wirepb.TimeMethod
	source     string
}

// upoint holds what the uncertainty bound needs from one sample.
type upoint struct {
	mono time.Duration
	c    float64 // bound + |residual|, ns
}

// predict returns the fitted boot (true Unix ns minus mono ns) at mono.
func (m *model) predict(mono time.Duration) int64 {
	return m.refBoot + int64(math.Round(m.drift*float64(mono-m.refMono)))
}

// trueTime returns the fitted true time at mono.
func (m *model) trueTime(mono time.Duration) int64 { return m.predict(mono) + int64(mono) }

// uncertainty bounds |predict(mono) - true boot| for honest sources whose
// drift stays within rho of the fit.
func (m *model) uncertainty(mono time.Duration) time.Duration {
	if mono >= m.lastMono {
		return durationOf(m.uLast + float64(mono-m.lastMono)*m.rho)
	}
	best := math.Inf(1)
	for _, p := range m.pts {
		d := math.Abs(float64(mono - p.mono))
		best = min(best, p.c+d*m.rho)
	}
	return durationOf(best)
}

func durationOf(ns float64) time.Duration {
	if ns >= math.MaxInt64 {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(math.Ceil(ns))
}

// consistent reports whether s's error interval meets the model's.
func (m *model) consistent(s sample) bool {
	diff := math.Abs(float64(s.boot - m.predict(s.mono)))
	return diff <= float64(s.bound)+float64(m.uncertainty(s.mono))
}

// estimator owns the sample window. It is not safe for concurrent use; the
// Clock serialises rounds.
type estimator struct {
	window     []sample // sorted by mono
	size       int
	maxAge     time.Duration
	driftBound float64 // dimensionless
	maxDrift   float64 // dimensionless
	pending    [][]sample
	confirm    int
}

func newEstimator(o *Options) *estimator {
	return &estimator{
		size:       o.WindowSize,
		maxAge:     o.MaxSampleAge,
		driftBound: o.DriftBoundPPM * 1e-6,
		maxDrift:   o.MaxDriftPPM * 1e-6,
		confirm:    o.StepConfirm,
	}
}

// roundResult says what a round did to the estimate.
type roundResult int

const (
	roundAccepted   roundResult = iota // samples added to the window
	roundRejected                      // sources disagreed with no majority
	roundSuspect                       // inconsistent with the fit, held pending
	roundSourceStep                    // confirmed step: window restarted
)

// addRound selects the truechimers among one round's samples (one per
// source), checks them against the current fit, and refits. cur is the
// current model (nil before the first fit); now is the monotonic time.
func (e *estimator) addRound(round []sample, cur *model, now time.Duration) (*model, roundResult, []sample) {
	chimers := selectTruechimers(round, cur)
	if len(chimers) == 0 {
		return cur, roundRejected, nil
	}
	if cur != nil {
		var ok []sample
		for _, s := range chimers {
			if cur.consistent(s) {
				ok = append(ok, s)
			}
		}
		if len(ok) == 0 {
			e.pending = append(e.pending, chimers)
			if len(e.pending) < e.confirm {
				return cur, roundSuspect, chimers
			}
			e.window = e.window[:0]
			for _, r := range e.pending {
				e.window = append(e.window, r...)
			}
			e.pending = nil
			e.trim(now)
			return e.fitRound(chimers), roundSourceStep, chimers
		}
		chimers = ok
	}
	e.pending = nil
	e.window = append(e.window, chimers...)
	e.trim(now)
	return e.fitRound(chimers), roundAccepted, chimers
}

// fitRound refits and names the round's sources and method in the model:
// NTP if any NTP server took part.
func (e *estimator) fitRound(round []sample) *model {
	m := e.fit()
	names := make([]string, 0, len(round))
	m.method = wirepb.TimeMethod_TIME_METHOD_HUB_SYNC
	for _, s := range round {
		if s.method == wirepb.TimeMethod_TIME_METHOD_NTP {
			m.method = s.method
		}
		if !slices.Contains(names, s.source) {
			names = append(names, s.source)
		}
	}
	slices.Sort(names)
	m.source = strings.Join(names, ",")
	return m
}

// trim sorts the window and drops samples that are too old or too many.
func (e *estimator) trim(now time.Duration) {
	slices.SortStableFunc(e.window, func(a, b sample) int { return cmpDur(a.mono, b.mono) })
	drop := 0
	for drop < len(e.window) && now-e.window[drop].mono > e.maxAge {
		drop++
	}
	if n := len(e.window) - drop; n > e.size {
		drop += n - e.size
	}
	// Keep the newest sample even if it is old: it still bounds the time.
	drop = min(drop, len(e.window)-1)
	if drop > 0 {
		e.window = slices.Delete(e.window, 0, drop)
	}
}

func cmpDur(a, b time.Duration) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// fit computes a model from the window: a weighted least-squares line
// through the lowest-delay half of the samples, and the uncertainty bound
// from every sample.
func (e *estimator) fit() *model {
	if len(e.window) == 0 {
		return nil
	}
	kept := lowestDelay(e.window)
	newest := e.window[len(e.window)-1]
	m := &model{
		refMono:   newest.mono,
		firstMono: e.window[0].mono,
		lastMono:  newest.mono,
		method:    newest.method,
		source:    newest.source,
	}
	// Regress in float64 relative to the newest sample, where the large
	// Unix values cancel and the ns precision is kept.
	var sw, sx, sy float64
	for _, s := range kept {
		w := weight(s)
		x := float64(s.mono - m.refMono)
		y := float64(s.boot - newest.boot)
		sw += w
		sx += w * x
		sy += w * y
	}
	xm, ym := sx/sw, sy/sw
	var sxx, sxy float64
	for _, s := range kept {
		w := weight(s)
		dx := float64(s.mono-m.refMono) - xm
		dy := float64(s.boot-newest.boot) - ym
		sxx += w * dx * dx
		sxy += w * dx * dy
	}
	span := kept[len(kept)-1].mono - kept[0].mono
	m.rho = e.maxDrift
	if len(kept) >= 3 && span >= minDriftSpan && sxx > 0 {
		m.drift = sxy / sxx
		m.driftKnown = true
		var ssr float64
		for _, s := range kept {
			x := float64(s.mono-m.refMono) - xm
			r := float64(s.boot-newest.boot) - ym - m.drift*x
			ssr += weight(s) * r * r
		}
		// Standard error of the slope, and the slope two worst-case
		// endpoint errors alone could produce.
		se := math.Sqrt(ssr / float64(len(kept)-2) / sxx)
		twoPoint := float64(kept[0].bound+kept[len(kept)-1].bound) / float64(span)
		m.rho = min(e.driftBound+3*se+twoPoint, e.maxDrift+math.Abs(m.drift))
	}
	m.refBoot = newest.boot + int64(math.Round(ym-m.drift*xm))
	m.pts = make([]upoint, len(e.window))
	m.uLast = math.Inf(1)
	for i, s := range e.window {
		r := math.Abs(float64(s.boot - m.predict(s.mono)))
		c := float64(s.bound) + r
		m.pts[i] = upoint{mono: s.mono, c: c}
		m.uLast = min(m.uLast, c+float64(m.lastMono-s.mono)*m.rho)
	}
	return m
}

func weight(s sample) float64 {
	b := float64(max(s.bound, minBound))
	return 1 / (b * b)
}

// lowestDelay returns the samples whose delay is at most the median: the
// clock filter's idea that the fastest exchanges are the least distorted
// by queueing. Small windows are kept whole.
func lowestDelay(w []sample) []sample {
	if len(w) < 4 {
		return w
	}
	delays := make([]time.Duration, len(w))
	for i, s := range w {
		delays[i] = s.delay
	}
	slices.Sort(delays)
	limit := delays[(len(delays)-1)/2]
	out := make([]sample, 0, len(w)/2+1)
	for _, s := range w {
		if s.delay <= limit {
			out = append(out, s)
		}
	}
	return out
}

// selectTruechimers keeps the samples whose error intervals share a point
// with a strict majority of the round (Marzullo's algorithm). With two
// disagreeing sources there is no majority; the current fit, if any,
// breaks the tie by acting as one more voter.
func selectTruechimers(round []sample, cur *model) []sample {
	if len(round) <= 1 {
		return round
	}
	type edge struct {
		at    int64
		delta int
	}
	edges := make([]edge, 0, 2*len(round))
	for _, s := range round {
		edges = append(edges, edge{s.lo(), +1}, edge{s.hi(), -1})
	}
	// At equal positions, opening edges first so touching intervals meet.
	slices.SortFunc(edges, func(a, b edge) int {
		if a.at != b.at {
			if a.at < b.at {
				return -1
			}
			return 1
		}
		return b.delta - a.delta
	})
	best, n := 0, 0
	var point int64
	for _, e := range edges {
		n += e.delta
		if n > best {
			best, point = n, e.at
		}
	}
	if 2*best > len(round) {
		out := make([]sample, 0, best)
		for _, s := range round {
			if s.lo() <= point && point <= s.hi() {
				out = append(out, s)
			}
		}
		return out
	}
	if cur == nil {
		return nil
	}
	var out []sample
	for _, s := range round {
		if cur.consistent(s) {
			out = append(out, s)
		}
	}
	if 2*(len(out)+1) > len(round)+1 {
		return out
	}
	return nil
}
