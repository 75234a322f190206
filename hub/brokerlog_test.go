package hub

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// TestBrokerLogDropsPackets checks that the embedded broker's packet dumps
// (a CONNECT's holds the password) never reach the hub's log.
func TestBrokerLogDropsPackets(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(minLevel{slog.NewTextHandler(&buf, nil), slog.LevelWarn}).With("component", "broker")
	l.Warn("error processing packet", "client", "dev-1", "pk", struct{ Password []byte }{[]byte("hunter2")})
	l.Info("below the minimum", "pk", "x")
	out := buf.String()
	if strings.Contains(out, "hunter2") || strings.Contains(out, "below the minimum") {
		t.Fatalf("log line: %s", out)
	}
	if !strings.Contains(out, "client=dev-1") || !strings.Contains(out, "component=broker") {
		t.Fatalf("the rest of the line is gone: %s", out)
	}
}
