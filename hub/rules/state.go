package rules

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
)

// stateVersion is the layout of MarshalState's output.
const stateVersion = 1

// snapshot is the evaluator's state as MarshalState writes it. Rules are
// matched by name on restore; state of rules no longer configured is
// dropped.
type snapshot struct {
	Version  int      `json:"version"`
	Alerts   []*Alert `json:"alerts"`
	AlertSeq []uint64 `json:"alert_seq"`
	Seq      uint64   `json:"seq"`
	WM       int64    `json:"wm"`
	LogTime  int64    `json:"log_time"`
	MinEvent int64    `json:"min_event"`

	Thresholds map[string]thresholdSnap         `json:"thresholds,omitempty"`
	Absences   map[string]map[string][]run      `json:"absences,omitempty"`
	Sequences  map[string]map[string]*seqDevice `json:"sequences,omitempty"`
	Offline    map[string]int64                 `json:"offline,omitempty"`
	Buffers    map[string]map[string]int64      `json:"buffers,omitempty"`
}

type thresholdSnap struct {
	Next     int64                        `json:"next"`
	Crossing map[string]map[int64]float64 `json:"crossing,omitempty"`
}

// MarshalState returns the evaluator's whole state: alerts (with their
// revisions), positions and per-rule memory. The hub saves it with its
// checkpoint so a restart that replays the log after it repeats the same
// alerts under the same ids and revisions.
func (e *Evaluator) MarshalState() ([]byte, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := snapshot{Version: stateVersion, Seq: e.seq, WM: e.wm, LogTime: e.logTime, MinEvent: e.minEvent,
		Thresholds: map[string]thresholdSnap{}, Absences: map[string]map[string][]run{},
		Sequences: map[string]map[string]*seqDevice{}, Offline: e.offline, Buffers: map[string]map[string]int64{}}
	for _, id := range slices.Sorted(maps.Keys(e.alerts)) {
		a := e.alerts[id]
		s.Alerts = append(s.Alerts, a)
		s.AlertSeq = append(s.AlertSeq, a.Seq)
	}
	for _, t := range e.thresholds {
		s.Thresholds[t.rule.Name] = thresholdSnap{Next: t.next, Crossing: t.crossing}
	}
	for _, a := range e.absences {
		g := map[string][]run{}
		for k, r := range a.groups {
			g[k] = r.R
		}
		s.Absences[a.rule.Name] = g
	}
	for _, q := range e.sequences {
		s.Sequences[q.rule.Name] = q.devices
	}
	k := 0
	for i := range e.rules {
		if e.rules[i].Kind == Buffer {
			s.Buffers[e.rules[i].Name] = e.buffers[k]
			k++
		}
	}
	return json.Marshal(&s)
}

// RestoreState replaces the evaluator's state with one MarshalState
// wrote. Call it before any input.
func (e *Evaluator) RestoreState(data []byte) error {
	var s snapshot
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("rules: restore state: %w", err)
	}
	if s.Version != stateVersion {
		return fmt.Errorf("rules: restore state: version %d, want %d", s.Version, stateVersion)
	}
	if len(s.AlertSeq) != len(s.Alerts) {
		return fmt.Errorf("rules: restore state: %d alerts, %d sequence numbers", len(s.Alerts), len(s.AlertSeq))
	}
	known := map[string]bool{}
	for i := range e.rules {
		known[e.rules[i].Name] = true
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.alerts = map[string]*Alert{}
	for i, a := range s.Alerts {
		if a == nil || !known[a.Rule] {
			continue
		}
		a.Seq = s.AlertSeq[i]
		e.alerts[a.ID] = a
	}
	e.seq, e.wm, e.logTime, e.minEvent = s.Seq, s.WM, s.LogTime, s.MinEvent
	for _, t := range e.thresholds {
		ts := s.Thresholds[t.rule.Name]
		t.next, t.crossing = ts.Next, ts.Crossing
		if t.crossing == nil {
			t.crossing = map[string]map[int64]float64{}
		}
	}
	for _, a := range e.absences {
		a.groups, a.order = map[string]*runs{}, nil
		for _, g := range slices.Sorted(maps.Keys(s.Absences[a.rule.Name])) {
			a.addGroup(g, &runs{R: s.Absences[a.rule.Name][g]})
		}
	}
	for _, q := range e.sequences {
		q.devices = map[string]*seqDevice{}
		for d, v := range s.Sequences[q.rule.Name] {
			if v != nil {
				q.devices[d] = v
			}
		}
	}
	e.offline = s.Offline
	if e.offline == nil {
		e.offline = map[string]int64{}
	}
	k := 0
	for i := range e.rules {
		if e.rules[i].Kind == Buffer {
			e.buffers[k] = s.Buffers[e.rules[i].Name]
			if e.buffers[k] == nil {
				e.buffers[k] = map[string]int64{}
			}
			k++
		}
	}
	return nil
}
