package sinks

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// EnsureWindowsTable and EnsureEventsTable expose the schema check to the
// external tests.
func EnsureWindowsTable(ctx context.Context, conn *pgx.Conn, table string, quantiles []string) error {
	return ensureTable(ctx, conn, parseTableName(table), windowsSchema(quantiles))
}

func EnsureEventsTable(ctx context.Context, conn *pgx.Conn, table string) error {
	return ensureTable(ctx, conn, parseTableName(table), eventsSchema())
}
