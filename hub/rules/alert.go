package rules

import (
	"cmp"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// State is an alert's current state.
type State string

// Alert states.
const (
	// Firing: the rule's condition holds for the alert's group and span.
	Firing State = "firing"
	// Resolved: it no longer holds (late data corrected it, or a live
	// condition cleared); the alert stays listed.
	Resolved State = "resolved"
)

// Alert is one alert at its latest revision.
type Alert struct {
	// ID is deterministic: rule/group/start in Unix ns; the same condition
	// over the same data always has the same id.
	ID    string `json:"id"`
	Rule  string `json:"rule"`
	Group string `json:"group"`
	// Start and End are the window (threshold), the matched span
	// (sequence), the silence (absence) or the episode (offline, buffer);
	// End is zero while an absence, offline or buffer episode lasts.
	Start time.Time `json:"start"`
	End   time.Time `json:"end,omitzero"`
	// Value is the window's aggregate (threshold), the span in seconds
	// (sequence, absence, offline) or the fill ratio (buffer).
	Value float64 `json:"value"`
	State State   `json:"state"`
	// Revision starts at 1 and grows with every change.
	Revision uint64 `json:"revision"`
	// FiredAt is the hub's processing time when the alert first fired: the
	// log's server time for event-time rules, so a replay gives the same.
	FiredAt time.Time `json:"fired_at"`
	// Seq orders changes across alerts (outputs keep their position in
	// it); it is not part of the alert's JSON.
	Seq uint64 `json:"-"`
}

func alertID(rule, group string, start int64) string {
	return rule + "/" + group + "/" + strconv.FormatInt(start, 10)
}

// Filter selects alerts for Query.
type Filter struct {
	// From and To select alerts with From <= Start < To (zero: unbounded).
	From, To time.Time
	// Rule and State, when set, must match.
	Rule  string
	State State
	// Limit caps the answer (0: DefaultQueryLimit; at most MaxQueryLimit).
	Limit int
	// Cursor continues a previous answer (its Next).
	Cursor string
}

// Query limits.
const (
	DefaultQueryLimit = 100
	MaxQueryLimit     = 10000
)

// ErrBadCursor is returned for a cursor Query did not make.
var ErrBadCursor = errors.New("rules: bad cursor")

// Query returns the alerts f selects ordered by (start, id), and the
// cursor of the next page ("" when this is the last).
func (e *Evaluator) Query(f Filter) ([]Alert, string, error) {
	if f.Limit < 0 || f.Limit > MaxQueryLimit {
		return nil, "", fmt.Errorf("rules: limit %d out of [0, %d]", f.Limit, MaxQueryLimit)
	}
	if f.Limit == 0 {
		f.Limit = DefaultQueryLimit
	}
	var afterStart int64
	var afterID string
	if f.Cursor != "" {
		b, err := base64.RawURLEncoding.DecodeString(f.Cursor)
		s, id, ok := strings.Cut(string(b), "|")
		if err != nil || !ok {
			return nil, "", ErrBadCursor
		}
		if afterStart, err = strconv.ParseInt(s, 10, 64); err != nil {
			return nil, "", ErrBadCursor
		}
		afterID = id
	}
	e.mu.Lock()
	var out []Alert
	for _, a := range e.alerts {
		if f.Rule != "" && a.Rule != f.Rule || f.State != "" && a.State != f.State ||
			!f.From.IsZero() && a.Start.Before(f.From) || !f.To.IsZero() && !a.Start.Before(f.To) {
			continue
		}
		if f.Cursor != "" {
			s := a.Start.UnixNano()
			if s < afterStart || s == afterStart && a.ID <= afterID {
				continue
			}
		}
		out = append(out, *a)
	}
	e.mu.Unlock()
	slices.SortFunc(out, func(a, b Alert) int {
		return cmp.Or(a.Start.Compare(b.Start), cmp.Compare(a.ID, b.ID))
	})
	next := ""
	if len(out) > f.Limit {
		out = out[:f.Limit]
		last := out[len(out)-1]
		next = base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(last.Start.UnixNano(), 10) + "|" + last.ID))
	}
	return out, next, nil
}

// Since returns up to limit alerts whose latest change has Seq > seq, in
// Seq order: an output delivers them and keeps the last Seq it sent.
// Intermediate revisions an output has not sent yet are skipped; it
// receives the latest.
func (e *Evaluator) Since(seq uint64, limit int) []Alert {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []Alert
	for _, a := range e.alerts {
		if a.Seq > seq {
			out = append(out, *a)
		}
	}
	slices.SortFunc(out, func(a, b Alert) int { return cmp.Compare(a.Seq, b.Seq) })
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out
}

// Seq is the sequence of the latest alert change (0 before the first):
// an output delivered up to it has sent everything.
func (e *Evaluator) Seq() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.seq
}

// Get returns the alert with id.
func (e *Evaluator) Get(id string) (Alert, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	a, ok := e.alerts[id]
	if !ok {
		return Alert{}, false
	}
	return *a, true
}

// set makes the alert id hold (state, value, end); it bumps the revision
// and publishes only when something changed. The caller holds mu.
func (e *Evaluator) set(rule, group string, start int64, state State, value float64, end int64) {
	id := alertID(rule, group, start)
	a := e.alerts[id]
	var endT time.Time
	if end != 0 {
		endT = time.Unix(0, end).UTC()
	}
	if a == nil {
		if state != Firing {
			return
		}
		a = &Alert{ID: id, Rule: rule, Group: group, Start: time.Unix(0, start).UTC(), FiredAt: e.procTime()}
		e.alerts[id] = a
		e.evict()
	} else if a.State == state && a.Value == value && a.End.Equal(endT) {
		return
	}
	if a.State != Firing && state == Firing && a.FiredAt.IsZero() {
		a.FiredAt = e.procTime()
	}
	a.State, a.Value, a.End = state, value, endT
	a.Revision++
	e.seq++
	a.Seq = e.seq
	e.changed = append(e.changed, *a)
}

// resolve resolves alert id if it exists; value and end are kept unless
// given.
func (e *Evaluator) resolve(rule, group string, start int64) {
	if a := e.alerts[alertID(rule, group, start)]; a != nil {
		var end int64
		if !a.End.IsZero() {
			end = a.End.UnixNano()
		}
		e.set(rule, group, start, Resolved, a.Value, end)
	}
}

// evict drops alerts beyond MaxAlerts: the oldest resolved first, then
// the oldest firing. It drops a sixteenth more than needed at once, so its
// sort is paid once per many new alerts. The caller holds mu.
func (e *Evaluator) evict() {
	if len(e.alerts) <= e.opt.MaxAlerts {
		return
	}
	all := make([]*Alert, 0, len(e.alerts))
	for _, a := range e.alerts {
		all = append(all, a)
	}
	slices.SortFunc(all, func(a, b *Alert) int {
		return cmp.Or(-cmp.Compare(a.State, b.State), a.Start.Compare(b.Start), cmp.Compare(a.ID, b.ID))
	})
	n := len(e.alerts) - e.opt.MaxAlerts + e.opt.MaxAlerts/16
	for _, a := range all[:min(n, len(all)-1)] {
		delete(e.alerts, a.ID)
		e.stats.Evicted++
	}
}
