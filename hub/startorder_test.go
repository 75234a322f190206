package hub

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestStartBindsBeforeOpeningStore: with the embedded broker's address in
// use, Start fails on the bind before it opens (or recovers) the store:
// the data directory is not even created.
func TestStartBindsBeforeOpeningStore(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	dir := filepath.Join(t.TempDir(), "data")
	o := testOptions(t, dir)
	o.MQTTListen = taken.Addr().String()
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	err = s.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "address already in use") || !strings.Contains(err.Error(), o.MQTTListen) {
		t.Fatalf("Run: %v, want the bind error naming %s", err, o.MQTTListen)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("data dir %s: %v; the store was opened before the bind failed", dir, err)
	}
}
