package rules

import (
	"slices"
	"strconv"

	"edgeflow/aggregate"
)

// sequenceState is one sequence rule's devices.
type sequenceState struct {
	rule    *Rule
	devices map[string]*seqDevice
}

// seqDevice holds the event times of one device that match the rule's
// First (A) and Then (B) conditions, sorted and without duplicates.
//
// An A at time a matches when b, the first B after a, exists, b-a is at
// most Within, and no other A lies in (a, b): the latest A before a B
// pairs with it. A late A between them breaks the match; a late B can
// create one or move its end.
type seqDevice struct{ A, B []int64 }

func (d *seqDevice) prune(cut int64) {
	i, _ := slices.BinarySearch(d.A, cut)
	d.A = slices.Delete(d.A, 0, i)
	j, _ := slices.BinarySearch(d.B, cut)
	d.B = slices.Delete(d.B, 0, j)
}

// insertTime adds t to the sorted set s; ok is false when it was there.
func insertTime(s []int64, t int64) ([]int64, bool) {
	if n := len(s); n == 0 || s[n-1] < t {
		return append(s, t), true
	}
	i, found := slices.BinarySearch(s, t)
	if found {
		return s, false
	}
	return slices.Insert(s, i, t), true
}

// prevA is the latest A strictly before t.
func (d *seqDevice) prevA(t int64) (int64, bool) {
	i, _ := slices.BinarySearch(d.A, t)
	if i == 0 {
		return 0, false
	}
	return d.A[i-1], true
}

// match returns the B that the A at a pairs with.
func (d *seqDevice) match(a, within int64) (int64, bool) {
	j, found := slices.BinarySearch(d.B, a)
	if found {
		j++
	}
	if j == len(d.B) || d.B[j]-a > within {
		return 0, false
	}
	b := d.B[j]
	i, found := slices.BinarySearch(d.A, a)
	if found {
		i++
	}
	if i < len(d.A) && d.A[i] < b {
		return 0, false
	}
	return b, true
}

func (e *Evaluator) sequenceEvent(s *sequenceState, device string, ev *aggregate.Event) {
	r := s.rule
	isA, isB := r.First.Match(ev.Metric, ev.Value), r.Then.Match(ev.Metric, ev.Value)
	if !isA && !isB {
		return
	}
	d := s.devices[device]
	if d == nil {
		if len(s.devices) >= e.opt.MaxGroups {
			e.stats.GroupsRefused++
			return
		}
		d = &seqDevice{}
		s.devices[device] = d
	}
	var addA, addB bool
	if isA {
		d.A, addA = insertTime(d.A, ev.Time)
	}
	if isB {
		d.B, addB = insertTime(d.B, ev.Time)
	}
	if !addA && !addB {
		return
	}
	if p, ok := d.prevA(ev.Time); ok {
		e.evalMatch(r, device, d, p)
	}
	if addA {
		e.evalMatch(r, device, d, ev.Time)
	}
}

// evalMatch fires or resolves the match of the A at a. An A without a
// match and without an alert (the common case) costs a lookup by an id
// built in scratch space, no allocation.
func (e *Evaluator) evalMatch(r *Rule, device string, d *seqDevice, a int64) {
	b, ok := d.match(a, int64(r.Within))
	if ok {
		e.set(r.Name, deviceGroup(device), a, Firing, float64(b-a)/1e9, b)
		return
	}
	e.idBuf = append(append(append(append(e.idBuf[:0], r.Name...), "/device="...), device...), '/')
	e.idBuf = strconv.AppendInt(e.idBuf, a, 10)
	if e.alerts[string(e.idBuf)] != nil {
		e.resolve(r.Name, deviceGroup(device), a)
	}
}
