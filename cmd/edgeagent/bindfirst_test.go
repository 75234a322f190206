package main

import (
	"edgeflow/internal/testproc"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBinaryBindsBeforeOpeningBuffer: an agent whose ingest address is in
// use exits with the bind error before it opens (and replays) its buffer.
func TestBinaryBindsBeforeOpeningBuffer(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs edgeagent")
	}
	bin := buildBinary(t, "edgeflow/cmd/edgeagent", "amd64")
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	data := filepath.Join(t.TempDir(), "data")
	code, out := testproc.RunToExit(t, bin, agentArgs(data, "--listen", taken.Addr().String()), nil, 20*time.Second)
	if code == 0 || !strings.Contains(out, "address already in use") || !strings.Contains(out, `config key "listen"`) {
		t.Errorf("exit %d, want non-zero with the bind error; output:\n%s", code, out)
	}
	if _, err := os.Stat(data); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("data dir: %v; the buffer was opened before the bind", err)
	}
}
