package hub

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"
)

// TestShutdownBounded deletes the data directory under a running hub (its
// store's close then retries a memtable flush forever) and stops it: Run
// (its part after Start) must return within ShutdownTimeout with an error
// that says what held it, not hang. The hub is not shut down at cleanup:
// its shutdown never ends.
func TestShutdownBounded(t *testing.T) {
	dir := t.TempDir()
	o := testOptions(t, dir)
	o.ShutdownTimeout = time.Second
	// The stuck close goes on logging after the test: not to t.Log.
	o.Logger = slog.New(slog.DiscardHandler)
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- s.serve(ctx) }()
	waitReady(t, s)
	d := newDevice(t, "tcp://"+s.BrokerAddr(), "gone1")
	d.send(makeBatch("gone1", d.stream, 1, 10)) // something in the memtable to flush
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case err := <-ran:
		if err == nil || !strings.Contains(err.Error(), "shutdown did not finish") || !strings.Contains(err.Error(), dir) {
			t.Fatalf("Run returned %v; want the shutdown timeout, naming the data directory", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run still stopping 20 s after ctx ended")
	}
}
