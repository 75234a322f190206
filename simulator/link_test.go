package simulator

import (
	"context"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// echoServer accepts connections on loopback and echoes what they send.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

// TestLinkLatency checks that bytes take at least the link's delay each
// way, arrive intact and in order.
func TestLinkLatency(t *testing.T) {
	addr := echoServer(t)
	var up atomic.Bool
	up.Store(true)
	dial := linkDialer(40*time.Millisecond, 20*time.Millisecond, false, up.Load, 1)
	c, err := dial(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	msg := []byte("0123456789")
	for i := range msg {
		if _, err := c.Write(msg[i : i+1]); err != nil {
			t.Fatal(err)
		}
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if rtt := time.Since(start); rtt < 80*time.Millisecond {
		t.Fatalf("round trip %v through a link of 40ms each way", rtt)
	}
	if string(got) != string(msg) {
		t.Fatalf("echo %q, sent %q", got, msg)
	}
}

// TestLinkSilentOutage checks that a silent outage kills the connection
// without closing it: writes vanish, reads wait until Close, and dialing
// fails while the link is down.
func TestLinkSilentOutage(t *testing.T) {
	addr := echoServer(t)
	var up atomic.Bool
	up.Store(true)
	dial := linkDialer(0, 0, true, up.Load, 1)
	c, err := dial(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("before the outage: %q %v", buf, err)
	}
	up.Store(false)
	if n, err := c.Write([]byte("lost")); n != 4 || err != nil {
		t.Fatalf("write into a silent link: %d %v (want it swallowed)", n, err)
	}
	read := make(chan error, 1)
	go func() { _, err := c.Read(buf); read <- err }()
	select {
	case err := <-read:
		t.Fatalf("read on a silent link returned %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	up.Store(true) // too late for this connection: its stream has a hole
	select {
	case err := <-read:
		t.Fatalf("read on a dead link returned %v after the link came back", err)
	case <-time.After(100 * time.Millisecond):
	}
	c.Close()
	if err := <-read; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read after Close: %v", err)
	}
	up.Store(false)
	if _, err := dial(context.Background(), "tcp", addr); !errors.Is(err, errLinkDown) {
		t.Fatalf("dial while down: %v", err)
	}
}

// linkDialer returns an uplink Dial function that puts a device's link
// model between its uplink and the broker: a one-way delay of latency plus
// up to jitter on every chunk in each direction (order kept, as TCP keeps
// it), and, for silent outages, a link that stops carrying bytes without
// closing, so the agent finds out only through its keep-alive. up says
// whether the link is up now. While it is down a dial waits a second (the
// SYN goes nowhere) and fails.
func linkDialer(latency, jitter time.Duration, silent bool, up func() bool, seed uint64) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return newSockets(linkModel{latency: latency, jitter: jitter, silent: silent, linkUp: up}, seed, nil).dial
}
