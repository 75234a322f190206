package rules

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"edgeflow/aggregate"
)

// Options configure an Evaluator.
type Options struct {
	// Clock is the processing-time clock of offline rules (default
	// time.Now).
	Clock func() time.Time
	// AllowedLateness is the engine's: a window is final once the hub
	// watermark passes its end plus it (threshold rules on final windows).
	AllowedLateness time.Duration
	// Horizon is how far behind the watermark late events still change
	// absence and sequence alerts (default 7 days, the engine's default
	// late horizon); older events are counted and ignored.
	Horizon time.Duration
	// MaxAlerts bounds the alerts kept (default 100,000); beyond it the
	// oldest resolved ones go first, counted in Stats.Evicted.
	MaxAlerts int
	// MaxGroups bounds the groups (devices, tag values) each rule tracks
	// (default 100,000); events of further groups are counted and ignored.
	MaxGroups int
	// OnAlert, if set, receives every new alert revision after the input
	// that made it (outside the evaluator's lock, in order).
	OnAlert func([]Alert)
}

// EnsureDefaults fills zero fields with their defaults.
func (o *Options) EnsureDefaults() {
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Horizon == 0 {
		o.Horizon = 7 * 24 * time.Hour
	}
	if o.MaxAlerts == 0 {
		o.MaxAlerts = 100_000
	}
	if o.MaxGroups == 0 {
		o.MaxGroups = 100_000
	}
}

// Validate names the first bad field.
func (o *Options) Validate() error {
	switch {
	case o.AllowedLateness < 0:
		return errors.New("rules: AllowedLateness is negative")
	case o.Horizon < 0:
		return errors.New("rules: Horizon is negative")
	case o.MaxAlerts < 0:
		return errors.New("rules: MaxAlerts is negative")
	case o.MaxGroups < 0:
		return errors.New("rules: MaxGroups is negative")
	}
	return nil
}

// Stats are the evaluator's counters.
type Stats struct {
	Alerts, Firing int
	// Evicted counts alerts dropped beyond MaxAlerts.
	Evicted uint64
	// TooLate counts events older than the horizon; GroupsRefused those of
	// groups beyond MaxGroups.
	TooLate, GroupsRefused uint64
	// QueryErrors counts window queries Feed could not run.
	QueryErrors uint64
}

// Evaluator evaluates rules over the hub's inputs and keeps the alerts.
// It is safe for concurrent use; inputs are applied one at a time.
type Evaluator struct {
	opt   Options
	rules []Rule

	mu        sync.Mutex
	alerts    map[string]*Alert
	seq       uint64
	changed   []Alert
	publishMu sync.Mutex
	stats     Stats

	// wm is the hub watermark (Unix ns); logTime the latest server time of
	// an observed batch; minEvent the earliest event time observed.
	wm, logTime, minEvent int64
	// pruned is the watermark of the last prune.
	pruned int64
	// idBuf is scratch space for alert ids that are only looked up.
	idBuf []byte
	// statusTime is the time of the status Buffer is applying (0
	// otherwise): the fired_at of the alerts it fires.
	statusTime int64

	thresholds []*thresholdState
	absences   []*absenceState
	sequences  []*sequenceState
	// seqByMetric indexes the sequence rules by the metrics of their
	// conditions, so an event costs one lookup, not one test per rule.
	seqByMetric map[string][]*sequenceState
	offline     map[string]int64 // device -> offline since (0: online)
	buffers     []map[string]int64
}

// New returns an evaluator of rules (as Parse returns them).
func New(rules []Rule, opt Options) (*Evaluator, error) {
	opt.EnsureDefaults()
	if err := opt.Validate(); err != nil {
		return nil, err
	}
	e := &Evaluator{opt: opt, rules: rules, alerts: map[string]*Alert{}, offline: map[string]int64{}}
	for i := range rules {
		r := &rules[i]
		switch r.Kind {
		case Threshold:
			e.thresholds = append(e.thresholds, newThreshold(r))
		case Absence:
			e.absences = append(e.absences, &absenceState{rule: r, groups: map[string]*runs{}})
		case Sequence:
			s := &sequenceState{rule: r, devices: map[string]*seqDevice{}}
			e.sequences = append(e.sequences, s)
			if e.seqByMetric == nil {
				e.seqByMetric = map[string][]*sequenceState{}
			}
			e.seqByMetric[r.First.Metric] = append(e.seqByMetric[r.First.Metric], s)
			if r.Then.Metric != r.First.Metric {
				e.seqByMetric[r.Then.Metric] = append(e.seqByMetric[r.Then.Metric], s)
			}
		case Buffer:
			e.buffers = append(e.buffers, map[string]int64{})
		case Offline:
		default:
			return nil, fmt.Errorf("rules: rule %q: unknown kind %q", r.Name, r.Kind)
		}
	}
	return e, nil
}

// Rules returns the evaluator's rules.
func (e *Evaluator) Rules() []Rule { return e.rules }

// Stats returns the counters.
func (e *Evaluator) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.stats
	s.Alerts = len(e.alerts)
	for _, a := range e.alerts {
		if a.State == Firing {
			s.Firing++
		}
	}
	return s
}

// procTime is the processing time alerts fire at: the status being applied
// (buffer rules), else the log's latest server time when batches were seen
// (so a replay repeats it), else the clock.
func (e *Evaluator) procTime() time.Time {
	if e.statusTime != 0 {
		return time.Unix(0, e.statusTime).UTC()
	}
	if e.logTime != 0 {
		return time.Unix(0, e.logTime).UTC()
	}
	return e.opt.Clock().UTC()
}

// unlockAndPublish releases mu and hands the changes to OnAlert.
func (e *Evaluator) unlockAndPublish() {
	ch := e.changed
	e.changed = nil
	if e.opt.OnAlert == nil || len(ch) == 0 {
		e.mu.Unlock()
		return
	}
	e.publishMu.Lock() // keeps the order of changes across inputs
	e.mu.Unlock()
	defer e.publishMu.Unlock()
	e.opt.OnAlert(ch)
}

// ObserveBatch takes one applied batch (fresh events of one stream):
// absence and sequence rules see its events; duplicates are harmless.
func (e *Evaluator) ObserveBatch(b *aggregate.Batch) {
	e.mu.Lock()
	defer e.unlockAndPublish()
	if b.ServerTime > e.logTime {
		e.logTime = b.ServerTime
	}
	for i := range b.Events {
		ev := &b.Events[i]
		if ev.Untrusted {
			continue
		}
		if e.minEvent == 0 || ev.Time < e.minEvent {
			e.minEvent = ev.Time
		}
		if e.wm != 0 && ev.Time < e.wm-int64(e.opt.Horizon) {
			e.stats.TooLate++
			continue
		}
		for _, a := range e.absences {
			e.absenceEvent(a, b.Device, ev)
		}
		for _, s := range e.seqByMetric[ev.Metric] {
			e.sequenceEvent(s, b.Device, ev)
		}
	}
}

// Watermark moves the hub watermark (event time; it never goes back):
// absence rules fire for silences it has passed.
func (e *Evaluator) Watermark(t time.Time) {
	e.mu.Lock()
	defer e.unlockAndPublish()
	e.watermark(t.UnixNano())
}

func (e *Evaluator) watermark(wm int64) {
	if wm <= e.wm {
		return
	}
	e.wm = wm
	for _, a := range e.absences {
		e.absenceWatermark(a)
	}
	if wm-e.pruned >= int64(e.opt.Horizon)/16 {
		e.pruned = wm
		e.prune()
	}
}

// Connection records a device's connection status at processing time at;
// the next Tick fires offline rules, and going online resolves them.
func (e *Evaluator) Connection(device string, online bool, at time.Time) {
	e.mu.Lock()
	defer e.unlockAndPublish()
	since, known := e.offline[device]
	switch {
	case online:
		if known && since != 0 {
			for i := range e.rules {
				if r := &e.rules[i]; r.Kind == Offline {
					if a := e.alerts[alertID(r.Name, deviceGroup(device), since)]; a != nil {
						e.set(r.Name, a.Group, since, Resolved, at.Sub(a.Start).Seconds(), at.UnixNano())
					}
				}
			}
		}
		e.offline[device] = 0
	case !known || since == 0:
		if !known && len(e.offline) >= e.opt.MaxGroups {
			e.stats.GroupsRefused++
			return
		}
		e.offline[device] = at.UnixNano()
	}
}

// Tick evaluates the processing-time rules (offline) at the clock's now.
func (e *Evaluator) Tick() {
	e.mu.Lock()
	defer e.unlockAndPublish()
	e.tick(e.opt.Clock())
}

func (e *Evaluator) tick(now time.Time) {
	for i := range e.rules {
		r := &e.rules[i]
		if r.Kind != Offline {
			continue
		}
		for _, dev := range slices.Sorted(maps.Keys(e.offline)) {
			since := e.offline[dev]
			if since == 0 || now.UnixNano()-since < int64(r.After) {
				continue
			}
			g := deviceGroup(dev)
			if e.alerts[alertID(r.Name, g, since)] == nil {
				e.set(r.Name, g, since, Firing, now.Sub(time.Unix(0, since)).Seconds(), 0)
			}
		}
	}
}

// BufferStatus is an agent's buffer as its status message reports it.
type BufferStatus struct {
	UsedBytes, CapacityBytes uint64
	// FillRate is the recent growth of UsedBytes, bytes/s (negative when
	// it drains).
	FillRate float64
	// At is when the status was reported (processing time).
	At time.Time
}

// Buffer records a device's buffer status: buffer rules fire when it is
// over their fill ratio or would be full within their time to full, and
// resolve when it no longer is.
func (e *Evaluator) Buffer(device string, s BufferStatus) {
	e.mu.Lock()
	defer e.unlockAndPublish()
	g := deviceGroup(device)
	e.statusTime = s.At.UnixNano()
	defer func() { e.statusTime = 0 }()
	ratio := 0.0
	if s.CapacityBytes > 0 {
		ratio = float64(s.UsedBytes) / float64(s.CapacityBytes)
	}
	k := 0
	for i := range e.rules {
		r := &e.rules[i]
		if r.Kind != Buffer {
			continue
		}
		episodes := e.buffers[k]
		k++
		hit := s.CapacityBytes > 0 && r.FillRatio > 0 && ratio >= r.FillRatio
		if r.TimeToFull > 0 && s.FillRate > 0 && s.CapacityBytes > 0 {
			free := float64(s.CapacityBytes) - float64(min(s.UsedBytes, s.CapacityBytes))
			hit = hit || free/s.FillRate < r.TimeToFull.Seconds()
		}
		start, open := episodes[device]
		switch {
		case hit && !open:
			if len(episodes) >= e.opt.MaxGroups {
				e.stats.GroupsRefused++
				continue
			}
			episodes[device] = s.At.UnixNano()
			e.set(r.Name, g, s.At.UnixNano(), Firing, ratio, 0)
		case !hit && open:
			delete(episodes, device)
			e.set(r.Name, g, start, Resolved, ratio, s.At.UnixNano())
		}
	}
}

func deviceGroup(device string) string { return "device=" + device }

// groupKey is an event's group under groupBy: dim=value pairs in
// groupBy's order, joined by commas.
func groupKey(groupBy []string, device string, ev *aggregate.Event) string {
	if len(groupBy) == 1 && groupBy[0] == "device" {
		return deviceGroup(device)
	}
	var b []byte
	for i, d := range groupBy {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, d...)
		b = append(b, '=')
		if d == "device" {
			b = append(b, device...)
			continue
		}
		if d == "metric" {
			b = append(b, ev.Metric...)
			continue
		}
		for _, t := range ev.Tags {
			if t.Key == d {
				b = append(b, t.Value...)
				break
			}
		}
	}
	return string(b)
}

// resultGroup is a window result's group in the same form.
func resultGroup(groupBy []string, g map[string]string) string {
	var b []byte
	for i, d := range groupBy {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, d...)
		b = append(b, '=')
		b = append(b, g[d]...)
	}
	return string(b)
}

// prune forgets event times the horizon has passed. The caller holds mu.
func (e *Evaluator) prune() {
	cut := e.wm - int64(e.opt.Horizon)
	for _, a := range e.absences {
		for _, r := range a.groups {
			r.prune(cut)
		}
	}
	for _, s := range e.sequences {
		for _, d := range s.devices {
			d.prune(cut - int64(s.rule.Within))
		}
	}
}
