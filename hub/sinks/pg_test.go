package sinks_test

import (
	"testing"

	"github.com/jackc/pgx/v5"

	"edgeflow/internal/testpg"
)

// testDSN is the project machine's PostgreSQL (trust auth, database test).
const testDSN = testpg.DSN

// pgSchema is a schema of the test's own (testpg.Schema).
func pgSchema(t testing.TB) (*pgx.Conn, string) {
	t.Helper()
	return testpg.Schema(t, "sinks_test")
}
