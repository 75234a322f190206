package sinks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"edgeflow/internal/retry"
)

// ErrPositionAhead is returned when a sink's stored position is past the
// end of the hub's log: the hub's data directory was replaced or reset
// while the table kept the old rows.
var ErrPositionAhead = errors.New("sink position is ahead of the hub's log")

// ErrPositionMoved is returned when a sink's stored position changed under
// it: another writer (a second hub with the same sink name) moved it. The
// transaction is rolled back and the sink reloads its position.
var ErrPositionMoved = errors.New("sink position moved by another writer")

// ErrBroken is returned by Step for a sink that stopped at a gap:
// retention deleted log entries it had not written (it was more than the
// hub's sink-max-lag entries behind). Its status says which; it writes
// nothing more until its position is reset.
var ErrBroken = errors.New("sink is broken: log entries it had not written were deleted")

// producer turns log entries into the rows of one kind of sink.
type producer interface {
	// schema is the table's schema.
	schema() tableSchema
	// mergeSQL moves the staged rows into the target table.
	mergeSQL(target, stage tableName) string
	// next reads the log after st.pos (up to applied) and returns what
	// to write and the state after them.
	next(ctx context.Context, st state, applied uint64) (output, state, error)
}

// output is what one step writes.
type output struct {
	// rows are the table's rows (postgres) or the window updates
	// (nats, mqtt), in the producer's schema order.
	rows [][]any
	// events are the event rows (eventsSchema order) of a message sink
	// with Config.Events.
	events [][]any
	// eventTimeNs is the largest corrected event time among the entries
	// read (0 without events).
	eventTimeNs int64
	// replaced are the session windows' ranges of start times whose every
	// window is in rows (or is not to be written): a row of the table in
	// such a range that rows lack is a session merged into another and is
	// deleted in the same transaction.
	replaced []replacedRange
}

// replacedRange is a metric's and window's start times [from, to).
type replacedRange struct {
	metric, window string
	from, to       time.Time
}

// state is what the positions table holds for a sink.
type state struct {
	pos uint64
	// wm is the engine watermark the windows sink had covered (zero for
	// the events sink, or before the first write).
	wm time.Time
}

// Status is what GET /v1/sinks reports for a sink.
type Status struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
	// Position is the log position committed with the rows in the target.
	Position uint64 `json:"position"`
	// Applied is the hub's applied log position at the last step; Lag is
	// Applied - Position, in log entries.
	Applied uint64 `json:"applied"`
	Lag     uint64 `json:"lag_entries"`
	// LagBytes is the size of those entries in the hub's log.
	LagBytes uint64 `json:"lag_bytes"`
	// LagSeconds is the event time the target is behind: the newest
	// corrected event time up to Applied minus the newest up to Position
	// (high-water marks the sink keeps from what it reads; after a start,
	// from the lagEventWindow entries up to each); 0 when Lag is, or
	// while no event is known up to Position.
	LagSeconds float64 `json:"lag_seconds"`
	// AppliedEventTime and PositionEventTime are those two event times
	// (absent while unknown: no event near the position).
	AppliedEventTime  time.Time `json:"applied_event_time,omitzero"`
	PositionEventTime time.Time `json:"position_event_time,omitzero"`
	// CheckedAt is when the last successful step read Applied: the target
	// holds everything the hub had applied then, unless Lag > 0.
	CheckedAt time.Time `json:"checked_at,omitzero"`
	// Connected is true while the sink holds a connection to its target.
	Connected bool `json:"connected"`
	// RowsWritten counts rows the target accepted since the hub started
	// (an upsert that changed nothing does not count).
	RowsWritten uint64 `json:"rows_written"`
	// LastError is the last failure ("" once a later step succeeded) and
	// LastErrorTime when it happened.
	LastError     string    `json:"last_error,omitempty"`
	LastErrorTime time.Time `json:"last_error_time,omitzero"`
	// PastMaxLag is true when, at the hub's last retention pass, the sink
	// was more than sink-max-lag entries behind: it no longer holds
	// retention back, and breaks if retention deletes entries it has not
	// written (those older than retention-max-age).
	PastMaxLag bool `json:"past_max_lag"`
	// Broken is true when the sink stopped at a gap (Gap says which
	// entries): it writes nothing more until its position is reset.
	Broken bool `json:"broken"`
	// Gap, when set, says which log entries retention deleted before the
	// sink read them: what they held is missing from the target.
	Gap *Gap `json:"gap,omitempty"`
}

// Gap is a run of log entries a sink never read because retention deleted
// them first.
type Gap struct {
	// From and To are the first and last deleted positions.
	From uint64 `json:"from"`
	To   uint64 `json:"to"`
	// Reason says why and what to do.
	Reason string `json:"reason"`
}

// lagEventWindow bounds the log entries read for an event time up to a
// position the sink has not seen yet (after a start: a one-off read), and
// lagUpdateWindow those read per lag update (only the entries applied
// since the last); ticks and statuses carry no event.
const (
	lagEventWindow  = 1024
	lagUpdateWindow = 64
)

// lagInterval is the least time between two lag computations of a sink
// that is not stepping (target down, broken).
const lagInterval = time.Second

// Sink follows the hub's log into one target table. Create it with New,
// check it with Open, and Run it.
type Sink struct {
	cfg  Config
	src  Source
	prod producer
	m    *Metrics
	log  *slog.Logger
	tgt  target // owned by Run (or Open before Run)
	st   state
	// stored is the position the target holds: st.pos unless a gap moved
	// st past it; commits compare against it.
	stored uint64

	// broken is set when the sink stopped at a gap (Run and Step only).
	broken bool
	// loaded is set once stored was read from the target: a gap can be
	// judged while the target is down from then on.
	loaded bool
	// lag caches the lag computation (Run and Step only).
	lag lagCache

	mu     sync.Mutex
	status Status
}

// lagCache holds the last lag figures so that each update reads only the
// log entries that changed: the bytes of (pos, applied] and the event
// times near pos and applied.
type lagCache struct {
	ok                bool
	pos, applied      uint64
	bytes             uint64
	posET, appliedET  int64 // Unix ns; 0 unknown
	posETOK, applETOK bool
	at                time.Time
}

// New builds the sink of cfg over src; nothing is connected until Open or
// Run. m may be nil (no metrics).
func New(cfg Config, src Source, m *Metrics, log *slog.Logger) (*Sink, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	s := &Sink{cfg: cfg, src: src, m: m, log: log.With("sink", cfg.Name)}
	switch cfg.Kind {
	case KindPostgresWindows, KindNATS, KindMQTT:
		p, err := newWindowsProducer(cfg, src)
		if err != nil {
			return nil, err
		}
		s.prod = p
	case KindPostgresEvents:
		s.prod = &eventsProducer{cfg: cfg, src: src}
	}
	switch cfg.Kind {
	case KindNATS:
		s.tgt = newNATSTarget(cfg, s.prod)
	case KindMQTT:
		s.tgt = newMQTTTarget(cfg, s.prod, s.log)
	default:
		s.tgt = newPGTarget(cfg, s.prod)
	}
	s.status = Status{Name: cfg.Name, Kind: cfg.Kind}
	m.brokenSet(cfg.Name, false)
	return s, nil
}

// Name is the sink's configured name.
func (s *Sink) Name() string { return s.cfg.Name }

// SetPastMaxLag records whether the hub's retention no longer waits for
// the sink (Status.PastMaxLag); the hub sets it at each retention pass.
func (s *Sink) SetPastMaxLag(past bool) {
	s.setStatus(func(st *Status) { st.PastMaxLag = past })
}

// Status returns a copy of the sink's status.
func (s *Sink) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.status
}

// Open connects to the target, creates or checks the tables (or stream)
// and loads the sink's position. The hub calls it at start so a table that
// does not match (ErrSchemaMismatch) stops the hub with the column's name;
// Run calls it again after every failure.
func (s *Sink) Open(ctx context.Context) error {
	s.tgt.close()
	st, err := s.tgt.open(ctx)
	if err == nil {
		s.st, s.stored, s.loaded = st, st.pos, true
		if err = s.checkPosition(ctx); errors.Is(err, ErrBroken) {
			err = nil // connected; Run and Step stop at the gap
		}
	}
	if err != nil {
		s.tgt.close()
		return fmt.Errorf("sink %s: %w", s.cfg.Name, err)
	}
	s.setStatus(func(st *Status) { st.Connected, st.Position = true, s.st.pos })
	return nil
}

// checkPosition compares the stored position with the hub's log: ahead of
// it is ErrPositionAhead; behind its first entry is a gap (checkGap).
func (s *Sink) checkPosition(ctx context.Context) error {
	applied, err := s.src.Applied(ctx)
	if err != nil {
		return err
	}
	if s.st.pos > applied && !s.broken {
		return fmt.Errorf("%w: the target holds position %d for sink %s (positions table or bucket %s), the hub's log ends at %d; if the hub's data was reset, delete the sink's position (and its rows) to rebuild the target",
			ErrPositionAhead, s.st.pos, s.cfg.Name, s.cfg.PositionsTable, applied)
	}
	return s.checkGap(ctx)
}

// checkGap compares the sink's position with the oldest entry the hub's
// log still holds. A sink that never committed starts after what
// retention deleted before it ran (reported as a gap, not broken). A sink
// with a stored position before that entry lost entries it needed: it is
// marked broken with the gap, counted, logged, and stops there (ErrBroken)
// rather than skip them.
func (s *Sink) checkGap(ctx context.Context) error {
	if s.broken {
		return ErrBroken
	}
	first, err := s.src.FirstPosition()
	if err != nil {
		return err
	}
	if first == 0 {
		// An empty log: retention deleted every entry up to the
		// applied position (or there never was one).
		applied, err := s.src.Applied(ctx)
		if err != nil {
			return err
		}
		first = applied + 1
	}
	if first <= s.st.pos+1 {
		return nil
	}
	gap := &Gap{From: s.st.pos + 1, To: first - 1}
	s.m.errorInc(s.cfg.Name, "gap")
	if s.stored == 0 {
		gap.Reason = fmt.Sprintf("log entries %d..%d were deleted by retention before the sink first ran; it starts after them", gap.From, gap.To)
		s.log.Warn("sink starts after the log's deleted entries", "from", gap.From, "to", gap.To)
		s.setStatus(func(st *Status) { st.Gap = gap })
		s.st.pos = first - 1
		return nil
	}
	gap.Reason = fmt.Sprintf("log entries %d..%d were deleted by retention before the sink wrote them (it was more than sink-max-lag entries behind and held retention back no more); "+
		"the sink stopped at position %d and writes nothing more: what those entries held is missing from the target. "+
		"To rebuild, delete the sink's position (positions table or bucket %s, or its retained position message) and, if needed, its rows, and restart the hub",
		gap.From, gap.To, s.st.pos, s.cfg.PositionsTable)
	s.broken = true
	s.log.Error("sink broken: retention deleted log entries it had not written", "from", gap.From, "to", gap.To, "position", s.st.pos)
	s.m.brokenSet(s.cfg.Name, true)
	s.setStatus(func(st *Status) {
		st.Broken, st.Gap, st.LastError, st.LastErrorTime = true, gap, gap.Reason, time.Now()
	})
	return ErrBroken
}

// Run follows the log until ctx ends: each step reads the entries after
// the sink's position, writes their rows and the new position in one
// transaction. On any failure it closes the connection, waits (doubling
// from 100ms up to MaxBackoff), reconnects and resumes from the position
// the target holds.
func (s *Sink) Run(ctx context.Context) {
	defer s.tgt.close()
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		if s.broken {
			// Stopped at its gap: only the lag moves on (the target is
			// not needed for that).
			s.updateLag(ctx)
			retry.Sleep(ctx, s.cfg.MaxBackoff)
			continue
		}
		err := s.ensureOpen(ctx)
		n := 0
		if err == nil {
			n, err = s.step(ctx)
		}
		if errors.Is(err, ErrBroken) {
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.updateLag(ctx)
			s.fail(err)
			retry.Sleep(ctx, backoff)
			backoff = min(backoff*2, s.cfg.MaxBackoff)
			continue
		}
		backoff = 100 * time.Millisecond
		if n == 0 {
			retry.Sleep(ctx, s.cfg.PollInterval)
		}
	}
}

// Close drops the connection of a sink that Open connected and that will
// not Run (Run closes its own when it returns).
func (s *Sink) Close() { s.tgt.close() }

func (s *Sink) ensureOpen(ctx context.Context) error {
	if s.tgt.connected() {
		return nil
	}
	return s.Open(ctx)
}

// Step runs one step outside Run (tests, and a hub draining its sinks):
// it opens the connection if needed and returns how many log entries the
// step covered.
func (s *Sink) Step(ctx context.Context) (int, error) {
	if err := s.ensureOpen(ctx); err != nil {
		return 0, err
	}
	n, err := s.step(ctx)
	if err != nil && !errors.Is(err, ErrBroken) {
		s.fail(err)
	}
	return n, err
}

// step writes the rows of the entries after the position, with the new
// position, in one transaction; it returns how many entries that covered.
func (s *Sink) step(ctx context.Context) (int, error) {
	checked := time.Now()
	applied, err := s.src.Applied(ctx)
	if err != nil {
		return 0, err
	}
	if err := s.checkGap(ctx); err != nil {
		return 0, err
	}
	if applied <= s.st.pos {
		s.setStatus(func(st *Status) { st.Applied, st.LastError, st.CheckedAt = applied, "", checked })
		s.setLag(applied, 0, s.stored)
		return 0, nil
	}
	out, next, err := s.prod.next(ctx, s.st, applied)
	if err != nil {
		return 0, err
	}
	written, err := s.tgt.commit(ctx, out, state{pos: s.stored, wm: s.st.wm}, next)
	if err != nil {
		return 0, err
	}
	covered := int(next.pos - s.st.pos)
	prevPos := s.stored
	s.st, s.stored = next, next.pos
	s.m.written(s.cfg.Name, written)
	s.setStatus(func(st *Status) {
		st.Position, st.Applied, st.LastError, st.CheckedAt = next.pos, applied, "", checked
		st.RowsWritten += uint64(written)
	})
	s.setLag(applied, out.eventTimeNs, prevPos)
	return covered, nil
}

// updateLag recomputes the lag of a sink that is not stepping (its target
// down, or broken), at most every lagInterval, so that its lag keeps
// growing in the status and the metrics while it waits.
func (s *Sink) updateLag(ctx context.Context) {
	if time.Since(s.lag.at) < lagInterval {
		return
	}
	if s.loaded {
		_ = s.checkGap(ctx) // broken while the target is down, not only when it is back
	}
	applied, err := s.src.Applied(ctx)
	if err != nil {
		return
	}
	s.setStatus(func(st *Status) { st.Applied = applied })
	s.setLag(applied, 0, s.stored)
}

// setLag computes the lag between the sink's committed position and
// applied: entries, bytes of the log and seconds of event time; it puts
// them in the status and the metrics. Only the log entries that changed
// since the last call are read: a step that moved the position from
// stepFrom passes the newest event time it wrote (stepET), so the entries
// it read are not read again.
func (s *Sink) setLag(applied uint64, stepET int64, stepFrom uint64) {
	pos := s.stored
	if pos > applied {
		applied = pos
	}
	l := &s.lag
	l.at = time.Now()
	var err error
	switch {
	case pos == applied:
		l.bytes = 0
	case l.ok && pos >= l.pos && applied >= l.applied && pos <= l.applied:
		var add, sub uint64
		if add, err = s.src.LogBytes(l.applied, applied); err == nil {
			sub, err = s.src.LogBytes(l.pos, pos)
		}
		if err == nil {
			l.bytes = l.bytes + add - min(sub, l.bytes+add)
		}
	default:
		l.bytes, err = s.src.LogBytes(pos, applied)
	}
	if err != nil {
		l.ok = false
		s.log.Debug("sink lag in bytes", "err", err)
		return
	}
	// Event times are high-water marks: the newest seen up to each
	// position.
	switch {
	case !l.posETOK || pos < l.pos || (pos > l.pos && stepFrom != l.pos):
		l.posET, l.posETOK = s.eventTimeIn(pos-min(pos, lagEventWindow), pos), true
	case pos > l.pos:
		l.posET = max(l.posET, stepET)
	}
	switch {
	case !l.applETOK || applied < l.applied:
		l.appliedET, l.applETOK = s.eventTimeIn(applied-min(applied, lagEventWindow), applied), true
	case applied == pos:
		l.appliedET = max(l.appliedET, l.posET)
	case applied > l.applied:
		l.appliedET = max(l.appliedET, s.eventTimeIn(max(l.applied, applied-min(applied, lagUpdateWindow)), applied))
	}
	l.ok, l.pos, l.applied = true, pos, applied
	var secs float64
	if pos < applied && l.appliedET > 0 && l.posET > 0 && l.appliedET > l.posET {
		secs = time.Duration(l.appliedET - l.posET).Seconds()
	}
	s.m.lagSet(s.cfg.Name, applied, pos, l.bytes, secs)
	s.setStatus(func(st *Status) {
		st.Lag, st.LagBytes, st.LagSeconds = applied-pos, l.bytes, secs
		st.AppliedEventTime, st.PositionEventTime = nsTime(l.appliedET), nsTime(l.posET)
	})
}

// eventTimeIn is the newest corrected event time in the log entries in
// (from, to] (0 when they hold no event), reading at most lagEventWindow
// entries.
func (s *Sink) eventTimeIn(from, to uint64) int64 {
	var newest int64
	err := s.src.Read(from, to, lagEventWindow, func(b *Batch) error {
		for i := range b.Events {
			newest = max(newest, b.Events[i].EventTimeNs)
		}
		return nil
	})
	if err != nil {
		return 0
	}
	return newest
}

// nsTime is t as a time, zero for 0.
func nsTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
}

// fail records err and drops the connection, so the next step reconnects
// and reloads the position the target holds (the outcome of a failed
// commit is unknown until then).
func (s *Sink) fail(err error) {
	s.log.Warn("sink step failed; retrying from the position the target holds", "err", err)
	s.m.errorInc(s.cfg.Name, "step")
	s.tgt.close()
	now := time.Now()
	s.setStatus(func(st *Status) { st.LastError, st.LastErrorTime, st.Connected = err.Error(), now, false })
}

func (s *Sink) setStatus(fn func(*Status)) {
	s.mu.Lock()
	fn(&s.status)
	s.mu.Unlock()
}
