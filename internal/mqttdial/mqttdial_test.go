package mqttdial

import (
	"context"
	"io"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
)

func TestHandles(t *testing.T) {
	for _, c := range []struct {
		brokers []string
		want    bool
	}{
		{[]string{"tcp://127.0.0.1:1883"}, true},
		{[]string{"mqtt://h:1883", "ssl://h:8883", "tls://h:8883", "mqtts://h:8883"}, true},
		{[]string{"tcp://h:1883", "ws://h:80/mqtt"}, false},
		{[]string{"wss://h/mqtt"}, false},
		{[]string{"unix:///run/mqtt.sock"}, false},
		{[]string{"tcp://h:1883\x7f"}, false},
	} {
		if got := Handles(c.brokers); got != c.want {
			t.Errorf("Handles(%v) = %v, want %v", c.brokers, got, c.want)
		}
	}
	t.Setenv("ALL_PROXY", "socks5://127.0.0.1:1080")
	if Handles([]string{"tcp://h:1883"}) {
		t.Error("Handles with ALL_PROXY set: true, want false (paho's dialer honours the proxy)")
	}
}

// TestOpenReadsThroughBuffer: what the peer writes in pieces arrives in
// order through the buffered connection, read a byte at a time the way
// paho reads a packet's header, and writes pass straight through.
func TestOpenReadsThroughBuffer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	want := []byte("\x30\x05\x00\x01tA\x40\x02\x00\x01")
	got := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.Write(want[:3])
		c.Write(want[3:])
		b := make([]byte, 4)
		io.ReadFull(c, b)
		got <- b
	}()
	u, _ := url.Parse("tcp://" + ln.Addr().String())
	c, err := Open(nil, 5*time.Second)(u, *mqtt.NewClientOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.(*bufConn); !ok {
		t.Fatalf("Open returned %T, want the buffered connection", c)
	}
	read := make([]byte, 0, len(want))
	one := make([]byte, 1)
	for len(read) < len(want) {
		if _, err := io.ReadFull(c, one); err != nil {
			t.Fatal(err)
		}
		read = append(read, one[0])
	}
	if string(read) != string(want) {
		t.Fatalf("read %q, want %q", read, want)
	}
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	select {
	case b := <-got:
		if string(b) != "ping" {
			t.Fatalf("peer read %q", b)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("peer got nothing")
	}
}

// TestOpenRefusesSelfConnect: a dial to a local port nothing listens on
// that picks that port as its source connects to itself (TCP simultaneous
// open); Open must refuse it and let the port go, or the broker that is
// about to start there cannot bind it.
func TestOpenRefusesSelfConnect(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().(*net.TCPAddr)
	ln.Close()
	self := func(ctx context.Context, network, a string) (net.Conn, error) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: addr.IP, Port: addr.Port}}
		return d.DialContext(ctx, network, a)
	}
	u, _ := url.Parse("tcp://" + addr.String())
	c, err := Open(self, 5*time.Second)(u, *mqtt.NewClientOptions())
	if err == nil {
		c.Close()
		t.Fatal("Open returned a connection to itself")
	}
	if !strings.Contains(err.Error(), "connected to itself") {
		t.Skipf("the dial did not connect to itself here: %v", err)
	}
	l2, err := net.Listen("tcp", addr.String())
	if err != nil {
		t.Fatalf("port still held after the refused self-connection: %v", err)
	}
	l2.Close()
}
