package sinks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// ErrPositionAhead is returned when a sink's stored position is past the
// end of the hub's log: the hub's data directory was replaced or reset
// while the table kept the old rows.
var ErrPositionAhead = errors.New("sink position is ahead of the hub's log")

// ErrPositionMoved is returned when a sink's stored position changed under
// it: another writer (a second hub with the same sink name) moved it. The
// transaction is rolled back and the sink reloads its position.
var ErrPositionMoved = errors.New("sink position moved by another writer")

// producer turns log entries into the rows of one kind of sink.
type producer interface {
	// schema is the table's schema.
	schema() tableSchema
	// mergeSQL moves the staged rows into the target table.
	mergeSQL(target, stage tableName) string
	// next reads the log after st.pos (up to applied) and returns the
	// rows to write and the state after them.
	next(ctx context.Context, st state, applied uint64) ([][]any, state, error)
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
	// Gap, when set, says which log entries retention deleted before the
	// sink read them: what they held is missing from the target.
	Gap string `json:"gap,omitempty"`
}

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

	mu     sync.Mutex
	status Status
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
	case KindPostgresWindows, KindNATS:
		p, err := newWindowsProducer(cfg, src)
		if err != nil {
			return nil, err
		}
		s.prod = p
	case KindPostgresEvents:
		s.prod = &eventsProducer{cfg: cfg, src: src}
	}
	if cfg.Kind == KindNATS {
		s.tgt = newNATSTarget(cfg, s.prod)
	} else {
		s.tgt = newPGTarget(cfg, s.prod)
	}
	s.status = Status{Name: cfg.Name, Kind: cfg.Kind}
	return s, nil
}

// Name is the sink's configured name.
func (s *Sink) Name() string { return s.cfg.Name }

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
		s.st, s.stored = st, st.pos
		err = s.checkPosition(ctx)
	}
	if err != nil {
		s.tgt.close()
		return fmt.Errorf("sink %s: %w", s.cfg.Name, err)
	}
	s.setStatus(func(st *Status) { st.Connected, st.Position = true, s.st.pos })
	return nil
}

// checkPosition compares the stored position with the hub's log: ahead of
// it is ErrPositionAhead; behind its first entry is a gap, reported and
// skipped.
func (s *Sink) checkPosition(ctx context.Context) error {
	applied, err := s.src.Applied(ctx)
	if err != nil {
		return err
	}
	if s.st.pos > applied {
		return fmt.Errorf("%w: the target holds position %d for sink %s (positions table or bucket %s), the hub's log ends at %d; if the hub's data was reset, delete the sink's position (and its rows) to rebuild the target",
			ErrPositionAhead, s.st.pos, s.cfg.Name, s.cfg.PositionsTable, applied)
	}
	return s.checkGap()
}

// checkGap reports a gap when the hub's log no longer holds the entry
// after the sink's position (retention deleted it, see
// hub.Options.SinkMaxLag) and moves the sink past it.
func (s *Sink) checkGap() error {
	first, err := s.src.FirstPosition()
	if err != nil {
		return err
	}
	if first > s.st.pos+1 {
		gap := fmt.Sprintf("log entries %d..%d were deleted by retention before the sink read them", s.st.pos+1, first-1)
		s.log.Error("sink gap: what those entries held is missing from the target", "gap", gap)
		s.m.errorInc(s.cfg.Name, "gap")
		s.setStatus(func(st *Status) { st.Gap = gap })
		s.st.pos = first - 1
	}
	return nil
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
		err := s.ensureOpen(ctx)
		n := 0
		if err == nil {
			n, err = s.step(ctx)
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.fail(err)
			sleep(ctx, backoff)
			backoff = min(backoff*2, s.cfg.MaxBackoff)
			continue
		}
		backoff = 100 * time.Millisecond
		if n == 0 {
			sleep(ctx, s.cfg.PollInterval)
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
	if err != nil {
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
	s.m.lagSet(s.cfg.Name, applied, s.st.pos)
	if err := s.checkGap(); err != nil {
		return 0, err
	}
	if applied <= s.st.pos {
		s.setStatus(func(st *Status) { st.Applied, st.Lag, st.LastError, st.CheckedAt = applied, 0, "", checked })
		return 0, nil
	}
	rows, next, err := s.prod.next(ctx, s.st, applied)
	if err != nil {
		return 0, err
	}
	written, err := s.tgt.commit(ctx, rows, state{pos: s.stored, wm: s.st.wm}, next)
	if err != nil {
		return 0, err
	}
	covered := int(next.pos - s.st.pos)
	s.st, s.stored = next, next.pos
	s.m.written(s.cfg.Name, written)
	s.m.lagSet(s.cfg.Name, applied, next.pos)
	s.setStatus(func(st *Status) {
		st.Position, st.Applied, st.Lag, st.LastError, st.CheckedAt = next.pos, applied, applied-next.pos, "", checked
		st.RowsWritten += uint64(written)
	})
	return covered, nil
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

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
