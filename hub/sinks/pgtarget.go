package sinks

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// target is where a sink's rows go: it commits rows and the position
// together, and reads the position back.
type target interface {
	// open connects, prepares the target and returns the stored state.
	open(ctx context.Context) (state, error)
	// commit writes out and moves the stored state from prev to next,
	// atomically (PostgreSQL) or idempotently (message ids: NATS, MQTT).
	commit(ctx context.Context, out output, prev, next state) (int64, error)
	// connected reports whether open succeeded and nothing failed since.
	connected() bool
	// close drops the connection; safe when not connected.
	close()
}

// pgTarget is a PostgreSQL table plus the positions table.
type pgTarget struct {
	cfg       Config
	prod      producer
	table     tableName
	positions tableName
	stage     tableName
	conn      *pgx.Conn
}

func newPGTarget(cfg Config, prod producer) *pgTarget {
	t := &pgTarget{cfg: cfg, prod: prod, table: parseTableName(cfg.Table)}
	pt := parseTableName(cfg.PositionsTable)
	if pt.schema == "" {
		pt.schema = t.table.schema
	}
	t.positions = pt
	t.stage = tableName{name: "edgeflow_stage_" + cfg.Kind}
	return t
}

func (s *pgTarget) connected() bool { return s.conn != nil && !s.conn.IsClosed() }

func (s *pgTarget) close() {
	if s.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		s.conn.Close(ctx)
		cancel()
		s.conn = nil
	}
}

// open connects, creates or checks the tables, creates the staging table
// and loads the position.
func (s *pgTarget) open(ctx context.Context) (state, error) {
	conn, err := pgx.Connect(ctx, s.cfg.DSN)
	if err != nil {
		return state{}, fmt.Errorf("connect: %w", err)
	}
	st, err := s.prepare(ctx, conn)
	if err != nil {
		conn.Close(context.Background())
		return state{}, err
	}
	s.conn = conn
	return st, nil
}

func (s *pgTarget) prepare(ctx context.Context, conn *pgx.Conn) (state, error) {
	if err := ensureTable(ctx, conn, s.table, s.prod.schema()); err != nil {
		return state{}, err
	}
	if err := ensureTable(ctx, conn, s.positions, positionsSchema()); err != nil {
		return state{}, err
	}
	stmt := fmt.Sprintf("CREATE TEMP TABLE IF NOT EXISTS %s (LIKE %s INCLUDING DEFAULTS) ON COMMIT DELETE ROWS", s.stage.sql(), s.table.sql())
	if _, err := conn.Exec(ctx, stmt); err != nil {
		return state{}, fmt.Errorf("create staging table: %w", err)
	}
	var (
		pos int64
		wm  *time.Time
	)
	err := conn.QueryRow(ctx, fmt.Sprintf("SELECT position, watermark FROM %s WHERE sink = $1", s.positions.sql()), s.cfg.Name).Scan(&pos, &wm)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return state{}, nil
	case err != nil:
		return state{}, fmt.Errorf("read position from %s: %w", s.positions, err)
	}
	st := state{pos: uint64(pos)}
	if wm != nil {
		st.wm = *wm
	}
	return st, nil
}

// commit writes rows and the position in one transaction. The position
// only moves from the value this sink loaded (else ErrPositionMoved).
func (s *pgTarget) commit(ctx context.Context, out output, prev, next state) (int64, error) {
	tx, err := s.conn.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // after Commit it is a no-op
	written, err := s.writeRows(ctx, tx, out.rows, out.replaced)
	if err != nil {
		return 0, err
	}
	var wm *time.Time
	if !next.wm.IsZero() {
		wm = &next.wm
	}
	tag, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %[1]s (sink, position, watermark, updated_at) VALUES ($1, $2, $3, now())
		ON CONFLICT (sink) DO UPDATE SET position = EXCLUDED.position, watermark = EXCLUDED.watermark, updated_at = now()
		WHERE %[1]s.position = $4`, s.positions.sql()), s.cfg.Name, int64(next.pos), wm, int64(prev.pos))
	if err != nil {
		return 0, fmt.Errorf("write position: %w", err)
	}
	if tag.RowsAffected() != 1 {
		return 0, fmt.Errorf("%w: %s no longer holds position %d for sink %s", ErrPositionMoved, s.positions, prev.pos, s.cfg.Name)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("commit: %w", err)
	}
	return written, nil
}

// writeRows writes rows in tx. Rows that only insert (events) are first
// copied straight into the table under a savepoint: the position commits
// with the rows, so they are normally new. A unique violation (rows
// already there: a positions row restored from an older backup, or a
// second writer) rolls back to the savepoint and takes the merge path,
// which skips them. Rows that upsert (windows) always take the merge path:
// COPY into the staging table, then INSERT ... ON CONFLICT.
func (s *pgTarget) writeRows(ctx context.Context, tx pgx.Tx, rows [][]any, replaced []replacedRange) (int64, error) {
	if len(rows) == 0 && len(replaced) == 0 {
		return 0, nil
	}
	cols := s.prod.schema().names()
	if s.cfg.Kind == KindPostgresEvents {
		if _, err := tx.Exec(ctx, "SAVEPOINT edgeflow_direct"); err != nil {
			return 0, fmt.Errorf("savepoint: %w", err)
		}
		n, err := tx.CopyFrom(ctx, s.table.identifier(), cols, pgx.CopyFromRows(rows))
		if err == nil {
			_, err = tx.Exec(ctx, "RELEASE SAVEPOINT edgeflow_direct")
			return n, err
		}
		if pe := (*pgconn.PgError)(nil); !errors.As(err, &pe) || pe.Code != uniqueViolation {
			return 0, fmt.Errorf("copy %d rows into %s: %w", len(rows), s.table, err)
		}
		if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT edgeflow_direct"); err != nil {
			return 0, fmt.Errorf("rollback to savepoint: %w", err)
		}
	}
	if _, err := tx.CopyFrom(ctx, s.stage.identifier(), cols, pgx.CopyFromRows(rows)); err != nil {
		return 0, fmt.Errorf("copy %d rows into the staging table: %w", len(rows), err)
	}
	deleted := int64(0)
	for _, r := range replaced {
		tag, err := tx.Exec(ctx, fmt.Sprintf(`DELETE FROM %[1]s t WHERE t.metric = $1 AND t."window" = $2 AND t.start_time >= $3 AND t.start_time < $4
			AND NOT EXISTS (SELECT 1 FROM %[2]s s WHERE s.metric = t.metric AND s."window" = t."window" AND s.group_key = t.group_key AND s.start_time = t.start_time)`,
			s.table.sql(), s.stage.sql()), r.metric, r.window, r.from, r.to)
		if err != nil {
			return 0, fmt.Errorf("delete merged sessions from %s: %w", s.table, err)
		}
		deleted += tag.RowsAffected()
	}
	if len(rows) == 0 {
		return deleted, nil
	}
	tag, err := tx.Exec(ctx, s.prod.mergeSQL(s.table, s.stage))
	if err != nil {
		return 0, fmt.Errorf("merge into %s: %w", s.table, err)
	}
	return deleted + tag.RowsAffected(), nil
}

// uniqueViolation is PostgreSQL's SQLSTATE for a duplicate key.
const uniqueViolation = "23505"
