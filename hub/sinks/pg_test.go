package sinks_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"edgeflow/wire"
)

// testDSN is the project machine's PostgreSQL (trust auth, database test).
const testDSN = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// pgSchema connects to the test PostgreSQL, creates a schema of the
// test's own and drops it at cleanup. Without a PostgreSQL it skips the
// test, unless EDGEFLOW_REQUIRE_POSTGRES=1 (CI), when it fails.
func pgSchema(t testing.TB) (*pgx.Conn, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, testDSN)
	if err != nil {
		if os.Getenv("EDGEFLOW_REQUIRE_POSTGRES") == "1" {
			t.Fatalf("PostgreSQL at %s unreachable and EDGEFLOW_REQUIRE_POSTGRES=1: %v", testDSN, err)
		}
		t.Skipf("skipping: PostgreSQL at %s unreachable (%v); .ci/run starts one, or set EDGEFLOW_REQUIRE_POSTGRES=1 to fail instead", testDSN, err)
	}
	id := wire.NewStreamID()
	schema := fmt.Sprintf("sinks_test_%x", id[:6])
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
		conn.Close(ctx)
	})
	return conn, schema
}
