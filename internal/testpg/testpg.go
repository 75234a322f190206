// Package testpg gives tests a schema of their own in the machine's
// PostgreSQL, so the sinks' tests in several packages share one way of
// finding it, skipping without it and cleaning up after themselves.
package testpg

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"edgeflow/wire"
)

// DSN is the project machine's PostgreSQL (trust auth, database test).
const DSN = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// Schema connects to DSN, creates a schema named prefix plus a random
// suffix and drops it at cleanup. Without a PostgreSQL it skips the test,
// unless EDGEFLOW_REQUIRE_POSTGRES=1 (CI), when it fails.
func Schema(t testing.TB, prefix string) (*pgx.Conn, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, DSN)
	if err != nil {
		if os.Getenv("EDGEFLOW_REQUIRE_POSTGRES") == "1" {
			t.Fatalf("PostgreSQL at %s unreachable and EDGEFLOW_REQUIRE_POSTGRES=1: %v", DSN, err)
		}
		t.Skipf("skipping: PostgreSQL at %s unreachable (%v); .ci/run starts one, or set EDGEFLOW_REQUIRE_POSTGRES=1 to fail instead", DSN, err)
	}
	id := wire.NewStreamID()
	schema := fmt.Sprintf("%s_%x", prefix, id[:6])
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
