package hub

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"edgeflow/hub/alertout"
	"edgeflow/hub/hublog"
	"edgeflow/hub/rules"
	"edgeflow/internal/lograte"
)

// alertPruneMax bounds the alert changes one position commit deletes, so
// the transaction stays small; the next commits delete the rest.
const alertPruneMax = 1000

// alertLog is the alert-change log the outputs deliver from: every alert
// revision the rules consumer makes, written to the hub's store under its
// change sequence while the applier applies the input that made it, and
// deleted once every output has delivered it. The evaluator's sequences
// are a function of the log (its state is checkpointed and the log after
// the checkpoint replayed), so after a crash the replay writes the changes
// the crash lost again, under the same sequences with the same content.
type alertLog struct {
	st   *hublog.Store
	log  *slog.Logger
	rate rateLog

	mu sync.Mutex
	// first and last are the first and last sequences the log holds
	// (first > last: empty); floor is the lowest position of the outputs
	// at start: replayed changes at or below it are not written again.
	first, last, floor uint64
	positions          map[string]uint64
	outputs            []*alertout.Output
}

// append writes changes to the log (the rules consumer's OnAlert, on the
// applier's goroutine) and wakes the outputs.
func (l *alertLog) append(changes []rules.Alert) {
	batch := make([]hublog.AlertChange, 0, len(changes))
	for _, a := range changes {
		if a.Seq <= l.floor {
			continue
		}
		b, err := json.Marshal(a)
		if err != nil {
			l.rate.log(l.log, "alert_outputs", "", "alert change not logged", err)
			continue
		}
		batch = append(batch, hublog.AlertChange{Seq: a.Seq, JSON: b})
	}
	if len(batch) == 0 {
		return
	}
	l.mu.Lock()
	err := l.st.PutAlertChanges(batch)
	if err == nil {
		if l.first == 0 || l.first > l.last {
			l.first = batch[0].Seq
		}
		l.last = max(l.last, batch[len(batch)-1].Seq)
	}
	outs := l.outputs
	l.mu.Unlock()
	if err != nil {
		// The next start's replay writes them again (the checkpoint is
		// behind them), unless the store keeps failing: the hub then stops.
		l.rate.log(l.log, "alert_outputs", "", "alert changes not logged", err)
		return
	}
	for _, o := range outs {
		o.Notify()
	}
}

// ChangesAfter implements alertout.Log.
func (l *alertLog) ChangesAfter(seq uint64, limit int) ([]alertout.Change, error) {
	cs, err := l.st.AlertChangesAfter(seq, limit)
	if err != nil {
		return nil, err
	}
	out := make([]alertout.Change, len(cs))
	for i, c := range cs {
		out[i] = alertout.Change{Seq: c.Seq, JSON: c.JSON}
	}
	return out, nil
}

// Bounds implements alertout.Log.
func (l *alertLog) Bounds() (first, last uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.first > l.last {
		return 0, 0
	}
	return l.first, l.last
}

// Commit implements alertout.Log: it stores the output's position and
// deletes the changes every output has delivered.
func (l *alertLog) Commit(name string, pos uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.positions[name] = pos
	low := pos
	for _, p := range l.positions {
		low = min(low, p)
	}
	from, to := l.first, min(low, l.last, l.first+alertPruneMax-1)
	if from == 0 || to < from {
		from, to = 0, 0
	}
	if err := l.st.CommitAlertOutput(name, pos, from, to); err != nil {
		return err
	}
	if from != 0 {
		l.first = to + 1
	}
	return nil
}

// openAlertLog loads the outputs' positions and the log's bounds; it runs
// before recovery, whose replay appends to the log.
func (s *Server) openAlertLog() error {
	if s.rules == nil || len(s.opts.AlertOutputs) == 0 {
		return nil
	}
	stored, err := s.st.LoadAlertOutputPositions()
	if err != nil {
		return err
	}
	first, last, err := s.st.AlertChangeBounds()
	if err != nil {
		return err
	}
	l := s.rules.out
	l.st, l.first, l.last = s.st, first, last
	if first == 0 {
		l.first = last + 1
	}
	l.positions = map[string]uint64{}
	for i, c := range s.opts.AlertOutputs {
		p := stored[c.Name]
		l.positions[c.Name] = p
		if i == 0 || p < l.floor {
			l.floor = p
		}
	}
	return nil
}

// checkAlertSeq runs after recovery: an output position or a logged
// change past the evaluator's sequence means the sequence went back (the
// checkpoint held no rules state, say after a run without rules), so the
// old sequences name other changes. The log is cleared and every output
// continues from the evaluator's sequence; the changes the replay made
// are not sent.
func (s *Server) checkAlertSeq() error {
	if s.rules == nil || s.rules.out == nil {
		return nil
	}
	l, seq := s.rules.out, s.rules.ev.Seq()
	l.mu.Lock()
	defer l.mu.Unlock()
	back := l.last > seq
	for _, p := range l.positions {
		back = back || p > seq
	}
	if !back {
		return nil
	}
	s.log.Warn("alert change sequence went back (the checkpoint held no rules state): alert outputs continue from the rules' sequence; changes made before are not sent",
		"alert_seq", seq, "last_logged", l.last)
	if err := s.st.ResetAlertOutputs(seq); err != nil {
		return err
	}
	l.first, l.last, l.floor = seq+1, seq, seq
	for name := range l.positions {
		l.positions[name] = seq
	}
	return nil
}

// newAlertLog prepares the alert-change log of Options.AlertOutputs
// (checked here: they need rules); nil without outputs.
func (s *Server) newAlertLog() (*alertLog, error) {
	if len(s.opts.AlertOutputs) == 0 {
		return nil, nil
	}
	seen := map[string]bool{}
	s.opts.AlertOutputs = slices.Clone(s.opts.AlertOutputs)
	for i := range s.opts.AlertOutputs {
		c := &s.opts.AlertOutputs[i]
		c.EnsureDefaults()
		if err := c.Validate(); err != nil {
			return nil, fmt.Errorf("%w: AlertOutputs: %w", ErrInvalidOptions, err)
		}
		if seen[c.Name] {
			return nil, fmt.Errorf("%w: AlertOutputs: output name %q used twice", ErrInvalidOptions, c.Name)
		}
		seen[c.Name] = true
	}
	return &alertLog{log: s.log, rate: rateLog{lim: lograte.Limiter{Every: time.Minute}, now: s.opts.Now}}, nil
}

// startAlertOutputs runs the outputs from their stored positions until
// Shutdown; it runs once the state is recovered and the broker connected.
func (s *Server) startAlertOutputs() error {
	if s.rules == nil || s.rules.out == nil {
		return nil
	}
	m, err := alertout.NewMetrics(s.opts.Registerer)
	if err != nil {
		return fmt.Errorf("register alert output metrics: %w", err)
	}
	l := s.rules.out
	var outs []*alertout.Output
	for _, c := range s.opts.AlertOutputs {
		l.mu.Lock()
		pos := l.positions[c.Name]
		l.mu.Unlock()
		o, err := alertout.New(c, l, s.Publish, m, s.log, pos)
		if err != nil {
			return fmt.Errorf("%w: AlertOutputs: %w", ErrInvalidOptions, err)
		}
		outs = append(outs, o)
	}
	l.mu.Lock()
	l.outputs = outs
	l.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	for _, o := range outs {
		s.loopsWG.Add(1)
		go func() { defer s.loopsWG.Done(); o.Run(ctx) }()
	}
	s.loopsWG.Add(1)
	go func() { defer s.loopsWG.Done(); <-s.done; cancel() }()
	return nil
}

// AlertOutputStatuses returns each alert output's status (empty without
// outputs).
func (s *Server) AlertOutputStatuses() []alertout.Status {
	out := []alertout.Status{}
	if s.rules == nil || s.rules.out == nil {
		return out
	}
	s.rules.out.mu.Lock()
	outs := s.rules.out.outputs
	s.rules.out.mu.Unlock()
	for _, o := range outs {
		out = append(out, o.Status())
	}
	return out
}

// serveAlertOutputs answers GET /v1/alerts/outputs.
func (s *Server) serveAlertOutputs(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"outputs": s.AlertOutputStatuses()})
}
