// Package tlsconf builds the TLS configuration of a client that dials an
// MQTT broker from PEM files. The agent's uplink, the agent's time
// connection and the hub's connection to an external broker all dial a
// broker this way, so they read their files, choose their TLS version and
// word their errors one way.
package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"
)

// Files name what a TLS client reads to reach a broker. A zero Files
// means no TLS unless the broker URL's scheme asks for it (see Scheme).
type Files struct {
	// CAFile is a PEM bundle of the CAs that sign the broker's certificate.
	// Default: the system roots.
	CAFile string
	// CertFile and KeyFile are the client's PEM certificate and key for
	// mutual TLS. Both or neither.
	CertFile, KeyFile string
	// ServerName overrides the name checked against the broker's
	// certificate. Default: the host of the broker URL.
	ServerName string
}

// Enabled reports whether any field is set: TLS is then on whatever the
// broker URL's scheme says.
func (f Files) Enabled() bool {
	return f.CAFile != "" || f.CertFile != "" || f.KeyFile != "" || f.ServerName != ""
}

// Config builds the client configuration (TLS 1.2 at least). It reads the
// files now, so a bad path fails when the client is created rather than at
// its first connection. Errors name the file and never a key's content;
// the caller prefixes them with its own name.
func (f Files) Config() (*tls.Config, error) {
	c := &tls.Config{ServerName: f.ServerName, MinVersion: tls.VersionTLS12}
	if f.CAFile != "" {
		pem, err := os.ReadFile(f.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tls ca file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls ca file %s holds no PEM certificate", f.CAFile)
		}
		c.RootCAs = pool
	}
	if f.CertFile != "" || f.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tls client certificate %s: %w", f.CertFile, err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// tlsSchemes are the broker URL schemes that mean TLS.
var tlsSchemes = []string{"ssl://", "tls://", "mqtts://", "wss://"}

// Scheme reports whether a broker URL's scheme asks for TLS: ssl://,
// tls://, mqtts:// or wss://.
func Scheme(brokerURL string) bool {
	for _, s := range tlsSchemes {
		if strings.HasPrefix(brokerURL, s) {
			return true
		}
	}
	return false
}
