package simulator

import (
	"math/rand/v2"
	"slices"
	"time"
)

// Span is a half-open interval [From, To) of real time since the start
// of the run.
type Span struct {
	From, To time.Duration
}

// Contains reports whether t lies in the span.
func (s Span) Contains(t time.Duration) bool { return t >= s.From && t < s.To }

// StepAt is a wall-clock step of By at real time At since the start.
type StepAt struct {
	At, By time.Duration
}

// Timeline is one device's schedule of faults, in real time since the
// start of the run (scenario times already divided by the time scale).
type Timeline struct {
	// LinkDown are merged, sorted spans without a network.
	LinkDown []Span
	// HubDown are spans in which the hub refuses the device's broker
	// connections and its live ones are cut (the scenario's hub outage,
	// the same for every device).
	HubDown []Span
	// AgentDown are agent crashes: the device runs but its agent does not
	// (events are not captured), then the agent restarts.
	AgentDown []Span
	// PowerDown are power losses: the device is off; it reboots at To.
	PowerDown []Span
	// Steps are wall-clock steps, sorted.
	Steps []StepAt
}

// BuildTimeline draws a device's timeline for a run of the scenario's
// duration from its class and rng. The scenario must have defaults and be
// valid.
func BuildTimeline(s *Scenario, c *DeviceClass, rng *rand.Rand) Timeline {
	var tl Timeline
	end := s.Duration
	var down []Span
	for _, o := range c.Link.Outages {
		shift := time.Duration(0)
		if c.Link.Spread > 0 {
			shift = time.Duration(rng.Int64N(int64(c.Link.Spread)))
		}
		down = append(down, Span{o.At + shift, o.At + shift + o.For})
	}
	if r := c.Link.Random; r.Every > 0 {
		down = append(down, poissonSpans(rng, end, r.Every, r.MinFor, r.MaxFor)...)
	}
	if s.FleetOutage.For > 0 {
		down = append(down, Span{s.FleetOutage.At, s.FleetOutage.At + s.FleetOutage.For})
	}
	tl.LinkDown = scaleSpans(s, MergeSpans(down))
	if h := s.HubOutage; h.For > 0 {
		tl.HubDown = scaleSpans(s, []Span{{h.At, h.At + h.For}})
	}
	if c.Crash.Every > 0 {
		tl.AgentDown = scaleSpans(s, MergeSpans(poissonSpans(rng, end, c.Crash.Every, c.Crash.Down, c.Crash.Down)))
	}
	var power []Span
	for _, p := range c.Clock.PowerLoss {
		power = append(power, Span{p.At, p.At + p.Down})
	}
	tl.PowerDown = scaleSpans(s, MergeSpans(power))
	for _, st := range c.Clock.Steps {
		tl.Steps = append(tl.Steps, StepAt{At: s.scaled(st.At), By: st.By})
	}
	slices.SortFunc(tl.Steps, func(a, b StepAt) int { return int(a.At - b.At) })
	return tl
}

// poissonSpans draws spans over [0, end): starts a Poisson process with
// mean interval every (counted from the end of the previous span),
// lengths uniform in [minFor, maxFor].
func poissonSpans(rng *rand.Rand, end, every, minFor, maxFor time.Duration) []Span {
	var out []Span
	t := time.Duration(0)
	for {
		t += time.Duration(rng.ExpFloat64() * float64(every))
		if t >= end {
			return out
		}
		d := minFor
		if maxFor > minFor {
			d += time.Duration(rng.Int64N(int64(maxFor - minFor + 1)))
		}
		out = append(out, Span{t, t + d})
		t += d
	}
}

// MergeSpans sorts spans and merges those that overlap or touch; empty
// spans are dropped.
func MergeSpans(in []Span) []Span {
	s := slices.DeleteFunc(slices.Clone(in), func(x Span) bool { return x.To <= x.From })
	slices.SortFunc(s, func(a, b Span) int { return int(a.From - b.From) })
	var out []Span
	for _, x := range s {
		if n := len(out); n > 0 && x.From <= out[n-1].To {
			out[n-1].To = max(out[n-1].To, x.To)
			continue
		}
		out = append(out, x)
	}
	return out
}

func scaleSpans(s *Scenario, in []Span) []Span {
	out := make([]Span, len(in))
	for i, x := range in {
		out[i] = Span{s.scaled(x.From), s.scaled(x.To)}
	}
	return out
}

// In reports whether t falls in one of the sorted spans.
func In(spans []Span, t time.Duration) bool {
	i, _ := slices.BinarySearchFunc(spans, t, func(s Span, t time.Duration) int {
		switch {
		case s.To <= t:
			return -1
		case s.From > t:
			return 1
		}
		return 0
	})
	return i < len(spans) && spans[i].Contains(t)
}
