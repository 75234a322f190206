package sinks

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// ErrSchemaMismatch is returned when an existing table lacks a column the
// sink writes, has it with another type, or lacks the unique key the
// upserts need. The message names the table and the column.
var ErrSchemaMismatch = errors.New("sink table does not match")

// column is one column of a sink's table: its name, its type in CREATE
// TABLE, and the data_type information_schema reports for it.
type column struct {
	name, sqlType, infoType string
}

var (
	colText   = func(n string) column { return column{n, "text", "text"} }
	colJSON   = func(n string) column { return column{n, "jsonb", "jsonb"} }
	colTime   = func(n string) column { return column{n, "timestamptz", "timestamp with time zone"} }
	colBigint = func(n string) column { return column{n, "bigint", "bigint"} }
	colFloat  = func(n string) column { return column{n, "double precision", "double precision"} }
	colBool   = func(n string) column { return column{n, "boolean", "boolean"} }
	colInt    = func(n string) column { return column{n, "integer", "integer"} }
)

// tableSchema is the public schema of a sink's table.
type tableSchema struct {
	cols []column
	key  []string // the primary key: the upsert's conflict target
	// index is the columns of the index for time-range queries.
	index []string
}

// windowsSchema is the table of a postgres_windows sink with the given
// quantile columns.
func windowsSchema(quantiles []string) tableSchema {
	cols := []column{colText("metric"), colText("window"), colJSON("group_key"), colTime("start_time"), colTime("end_time"),
		colBigint("count"), colFloat("sum"), colFloat("min"), colFloat("max"), colFloat("avg")}
	for _, q := range quantileNames {
		if slices.Contains(quantiles, q) {
			cols = append(cols, colFloat(q))
		}
	}
	cols = append(cols, colBool("final"), colInt("revision"), colBigint("late"), colBigint("log_position"))
	return tableSchema{cols: cols, key: []string{"metric", "window", "group_key", "start_time"},
		index: []string{"metric", "window", "start_time"}}
}

// eventsSchema is the table of a postgres_events sink.
func eventsSchema() tableSchema {
	return tableSchema{cols: []column{colText("device"), colText("stream"), colBigint("seq"), colText("metric"), colFloat("value"),
		colJSON("tags"), colTime("event_time"), colText("time_method"), colBigint("uncertainty_ns"), colTime("device_time"),
		colTime("server_time"), colBigint("log_position")},
		key: []string{"device", "stream", "seq"}, index: []string{"event_time"}}
}

// positionsSchema is the table of every sink's log position.
func positionsSchema() tableSchema {
	return tableSchema{cols: []column{colText("sink"), colBigint("position"), colTime("watermark"), colTime("updated_at")},
		key: []string{"sink"}}
}

// names returns the column names.
func (s tableSchema) names() []string {
	out := make([]string, len(s.cols))
	for i, c := range s.cols {
		out[i] = c.name
	}
	return out
}

// quoted joins names as quoted identifiers ("window" is a reserved word).
func quoted(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = pgx.Identifier{n}.Sanitize()
	}
	return strings.Join(q, ", ")
}

// tableName is a possibly schema-qualified table.
type tableName struct {
	schema, name string // schema "" is the connection's current schema
}

func parseTableName(s string) tableName {
	parts, _ := splitTable(s) // validated
	if len(parts) == 2 {
		return tableName{parts[0], parts[1]}
	}
	return tableName{name: parts[0]}
}

// sql is the quoted name for statements.
func (t tableName) sql() string {
	if t.schema == "" {
		return pgx.Identifier{t.name}.Sanitize()
	}
	return pgx.Identifier{t.schema, t.name}.Sanitize()
}

// identifier is the name for CopyFrom.
func (t tableName) identifier() pgx.Identifier {
	if t.schema == "" {
		return pgx.Identifier{t.name}
	}
	return pgx.Identifier{t.schema, t.name}
}

func (t tableName) String() string {
	if t.schema == "" {
		return t.name
	}
	return t.schema + "." + t.name
}

// ensureTable creates t with schema s when it is absent, or checks that it
// has every column of s with its type and a unique index on s.key.
func ensureTable(ctx context.Context, conn *pgx.Conn, t tableName, s tableSchema) error {
	have, err := tableColumns(ctx, conn, t)
	if err != nil {
		return err
	}
	if len(have) == 0 {
		return createTable(ctx, conn, t, s)
	}
	for _, c := range s.cols {
		got, ok := have[c.name]
		if !ok {
			return fmt.Errorf("%w: table %s has no column %s (%s); add it or point the sink at another table", ErrSchemaMismatch, t, c.name, c.sqlType)
		}
		if got != c.infoType {
			return fmt.Errorf("%w: table %s column %s is %s, want %s", ErrSchemaMismatch, t, c.name, got, c.infoType)
		}
	}
	ok, err := hasUniqueIndex(ctx, conn, t, s.key)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: table %s has no primary key or unique index on (%s), which the upserts need", ErrSchemaMismatch, t, strings.Join(s.key, ", "))
	}
	return nil
}

// tableColumns returns t's columns and their information_schema types
// (empty when t does not exist).
func tableColumns(ctx context.Context, conn *pgx.Conn, t tableName) (map[string]string, error) {
	rows, err := conn.Query(ctx, `SELECT column_name::text, data_type::text FROM information_schema.columns
		WHERE table_schema = COALESCE(NULLIF($1, ''), current_schema()) AND table_name = $2`, t.schema, t.name)
	if err != nil {
		return nil, fmt.Errorf("read columns of %s: %w", t, err)
	}
	out := map[string]string{}
	var name, typ string
	_, err = pgx.ForEachRow(rows, []any{&name, &typ}, func() error { out[name] = typ; return nil })
	if err != nil {
		return nil, fmt.Errorf("read columns of %s: %w", t, err)
	}
	return out, nil
}

// createTable creates t with its primary key and its time-range index.
func createTable(ctx context.Context, conn *pgx.Conn, t tableName, s tableSchema) error {
	defs := make([]string, 0, len(s.cols)+1)
	for _, c := range s.cols {
		def := pgx.Identifier{c.name}.Sanitize() + " " + c.sqlType
		if slices.Contains(s.key, c.name) {
			def += " NOT NULL"
		}
		defs = append(defs, def)
	}
	defs = append(defs, "PRIMARY KEY ("+quoted(s.key)+")")
	stmt := fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s (\n  %s\n)", t.sql(), strings.Join(defs, ",\n  "))
	if _, err := conn.Exec(ctx, stmt); err != nil {
		return fmt.Errorf("create table %s: %w", t, err)
	}
	if len(s.index) > 0 {
		idx := pgx.Identifier{t.name + "_time_idx"}.Sanitize()
		stmt := fmt.Sprintf("CREATE INDEX IF NOT EXISTS %s ON %s (%s)", idx, t.sql(), quoted(s.index))
		if _, err := conn.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("create index on %s: %w", t, err)
		}
	}
	return nil
}

// hasUniqueIndex reports whether t has a unique index whose columns are
// exactly key (in any order).
func hasUniqueIndex(ctx context.Context, conn *pgx.Conn, t tableName, key []string) (bool, error) {
	rows, err := conn.Query(ctx, `SELECT array_agg(a.attname::text ORDER BY a.attname)
		FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
		WHERE i.indrelid = $1::regclass AND i.indisunique AND i.indpred IS NULL
		GROUP BY i.indexrelid`, t.sql())
	if err != nil {
		return false, fmt.Errorf("read indexes of %s: %w", t, err)
	}
	want := slices.Sorted(slices.Values(key))
	found := false
	var cols []string
	_, err = pgx.ForEachRow(rows, []any{&cols}, func() error {
		found = found || slices.Equal(cols, want)
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("read indexes of %s: %w", t, err)
	}
	return found, nil
}
