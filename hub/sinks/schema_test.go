package sinks_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"edgeflow/hub/sinks"
)

func TestSchemaCreateCheckMismatch(t *testing.T) {
	conn, schema := pgSchema(t)
	ctx := context.Background()
	win, ev := schema+".w", schema+".e"
	if err := sinks.EnsureWindowsTable(ctx, conn, win, []string{"p50", "p99"}); err != nil {
		t.Fatalf("create: %v", err)
	}
	if err := sinks.EnsureEventsTable(ctx, conn, ev); err != nil {
		t.Fatalf("create: %v", err)
	}
	// A second start finds the tables and accepts them.
	if err := sinks.EnsureWindowsTable(ctx, conn, win, []string{"p50", "p99"}); err != nil {
		t.Fatalf("check: %v", err)
	}
	if err := sinks.EnsureEventsTable(ctx, conn, ev); err != nil {
		t.Fatalf("check: %v", err)
	}
	// The documented columns, with their types, and the time-range index.
	var n int
	err := conn.QueryRow(ctx, `SELECT count(*) FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'w' AND
		(column_name, data_type) IN (('metric','text'),('window','text'),('group_key','jsonb'),('start_time','timestamp with time zone'),
		('end_time','timestamp with time zone'),('count','bigint'),('sum','double precision'),('min','double precision'),
		('max','double precision'),('avg','double precision'),('final','boolean'),('revision','integer'),('late','bigint'),
		('p50','double precision'),('p99','double precision'))`, schema).Scan(&n)
	if err != nil || n != 15 {
		t.Fatalf("windows columns: %d of 15 (%v)", n, err)
	}
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_indexes WHERE schemaname = $1 AND indexname IN ('w_time_idx', 'e_time_idx')`, schema).Scan(&n); err != nil || n != 2 {
		t.Fatalf("time-range indexes: %d of 2 (%v)", n, err)
	}
	// Asking for a quantile the table lacks names the column.
	err = sinks.EnsureWindowsTable(ctx, conn, win, []string{"p95"})
	if !errors.Is(err, sinks.ErrSchemaMismatch) || !strings.Contains(err.Error(), "p95") {
		t.Fatalf("missing column: %v", err)
	}
	// A column of another type names the column and both types.
	if _, err := conn.Exec(ctx, "ALTER TABLE "+ev+" ALTER COLUMN seq TYPE text"); err != nil {
		t.Fatal(err)
	}
	err = sinks.EnsureEventsTable(ctx, conn, ev)
	if !errors.Is(err, sinks.ErrSchemaMismatch) || !strings.Contains(err.Error(), "column seq is text, want bigint") {
		t.Fatalf("type mismatch: %v", err)
	}
	// A table without the upserts' key is refused.
	if _, err := conn.Exec(ctx, "CREATE TABLE "+schema+".nokey (LIKE "+win+")"); err != nil {
		t.Fatal(err)
	}
	err = sinks.EnsureWindowsTable(ctx, conn, schema+".nokey", []string{"p50"})
	if !errors.Is(err, sinks.ErrSchemaMismatch) || !strings.Contains(err.Error(), "unique index") {
		t.Fatalf("no key: %v", err)
	}
}
