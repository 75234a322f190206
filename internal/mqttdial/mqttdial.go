// Package mqttdial opens paho's broker connections with buffered reads.
//
// Paho reads every packet straight from the socket: one read for the type
// byte, one per byte of the remaining length, one for the body, so three to
// six system calls a packet, and a batch's PUBLISH, its PUBACK and its ack
// are each such a packet. Behind a buffered reader one read call takes
// whatever the kernel holds, usually several packets. Writes are unchanged:
// paho writes each packet with one call already.
package mqttdial

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"os"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
)

// readBuffer is the read buffer of one connection: a few batch frames.
const readBuffer = 64 << 10

// DialFunc opens a network connection (net.Dialer.DialContext's shape).
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// Handles reports whether Open can open every broker in brokers: schemes
// tcp, mqtt, ssl, tls and mqtts, and no proxy set in the environment (paho's
// own dialer honours ALL_PROXY; Open does not). Paho keeps its own dialer
// otherwise (websockets, unix sockets, proxies).
func Handles(brokers []string) bool {
	if os.Getenv("ALL_PROXY") != "" || os.Getenv("all_proxy") != "" {
		return false
	}
	for _, b := range brokers {
		u, err := url.Parse(b)
		if err != nil {
			return false
		}
		switch u.Scheme {
		case "tcp", "mqtt", "ssl", "tls", "mqtts":
		default:
			return false
		}
	}
	return true
}

// Open returns a paho OpenConnectionFunc that dials with dial (nil: a
// net.Dialer), within timeout, adds TLS for the ssl, tls and mqtts schemes
// (the client options' TLS config, the URL's host as server name unless it
// sets one) and buffers the connection's reads.
func Open(dial DialFunc, timeout time.Duration) mqtt.OpenConnectionFunc {
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	return func(uri *url.URL, co mqtt.ClientOptions) (net.Conn, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		c, err := dial(ctx, "tcp", uri.Host)
		if err != nil {
			return nil, err
		}
		if c.LocalAddr().String() == c.RemoteAddr().String() {
			// TCP's simultaneous open: dialling a local port nothing listens
			// on can pick that very port as the source and connect to
			// itself. The socket would hold the port the broker (or hubd)
			// is about to bind, and paho would read its own CONNECT back.
			// Closed with a reset (linger 0), so no TIME_WAIT keeps the port.
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			c.Close()
			return nil, fmt.Errorf("mqttdial: %s connected to itself: nothing listens there", uri.Host)
		}
		switch uri.Scheme {
		case "ssl", "tls", "mqtts":
			conf := &tls.Config{MinVersion: tls.VersionTLS12}
			if co.TLSConfig != nil {
				conf = co.TLSConfig.Clone()
			}
			if conf.ServerName == "" {
				conf.ServerName = uri.Hostname()
			}
			tc := tls.Client(c, conf)
			if err := tc.HandshakeContext(ctx); err != nil {
				c.Close()
				return nil, err
			}
			c = tc
		}
		return &bufConn{Conn: c, r: bufio.NewReaderSize(c, readBuffer)}, nil
	}
}

// bufConn is a connection whose reads go through a buffer.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) Read(p []byte) (int, error) { return c.r.Read(p) }
