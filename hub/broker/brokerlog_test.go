package broker

import (
	"bytes"
	"edgeflow/hub/internal/hubtest"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
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

// TestBrokerLogConnectionEnds: mochi logs the end of a connection that
// ended in an error as a warning without a message. One the peer closed or
// reset (a device losing power or link) is not a warning; any other gets a
// message. Checked on records, then on a real embedded
func TestBrokerLogConnectionEnds(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(minLevel{slog.NewTextHandler(&buf, nil), slog.LevelWarn}).With("component", "broker")
	l.Warn("", "error", io.EOF)
	l.Warn("", "error", &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)})
	if buf.Len() != 0 {
		t.Fatalf("a connection the peer ended was logged: %s", buf.String())
	}
	l.Warn("", "error", errors.New("packet too large"))
	if out := buf.String(); !strings.Contains(out, `msg="client connection ended"`) || !strings.Contains(out, "packet too large") || !strings.Contains(out, "level=WARN") {
		t.Fatalf("log line: %s", out)
	}

	var logs hubtest.LockedBuffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	tr, err := NewSecureEmbeddedBroker(EmbeddedOptions{Addr: "127.0.0.1:0", Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Start(func(string, []byte) {}); err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	addr := tr.(BrokerAddr).Addr()
	// A client that connects and goes away without DISCONNECT.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	connect := []byte{0x10, 13, 0, 4, 'M', 'Q', 'T', 'T', 4, 2, 0, 60, 0, 1, 'd'}
	if _, err := c.Write(connect); err != nil {
		t.Fatal(err)
	}
	ack := make([]byte, 4)
	if _, err := io.ReadFull(c, ack); err != nil || ack[0] != 0x20 {
		t.Fatalf("CONNACK: %x, %v", ack, err)
	}
	c.Close()
	time.Sleep(100 * time.Millisecond) // its end is logged, or not, before the next client's
	// A client that sends a packet type that does not exist.
	g, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if _, err := g.Write([]byte{0xf0, 0}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		out := logs.String()
		if strings.Contains(out, `msg="client connection ended"`) {
			if strings.Contains(out, "EOF") {
				t.Fatalf("the client that went away was logged: %s", out)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no warning for the bad client: %q", out)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
