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

// TestBinaryBindsBeforeOpeningStore: hubd whose broker address is in use
// exits with the bind error before it opens the store (whose recovery
// takes seconds to minutes on a large one): the data directory is not
// created.
func TestBinaryBindsBeforeOpeningStore(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs hubd")
	}
	bin := testproc.Build(t, ".", "hubd")
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for _, c := range []struct{ name, httpAddr, mqttAddr string }{
		{"mqtt", "127.0.0.1:0", taken.Addr().String()},
		{"http", taken.Addr().String(), "127.0.0.1:0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			data := filepath.Join(t.TempDir(), "data")
			code, out := testproc.RunToExit(t, bin, []string{"--data-dir", data, "--http-addr", c.httpAddr, "--mqtt-listen", c.mqttAddr, "--log-level", "warn"}, nil, 20*time.Second)
			if code == 0 || !strings.Contains(out, "address already in use") || !strings.Contains(out, taken.Addr().String()) {
				t.Errorf("exit %d, want non-zero with the bind error naming %s; output:\n%s", code, taken.Addr(), out)
			}
			if _, err := os.Stat(data); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("data dir: %v; the store was opened before the bind", err)
			}
		})
	}
}
