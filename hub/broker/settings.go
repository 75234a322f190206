package broker

import (
	"fmt"
	"net/url"

	"edgeflow/internal/confval"
)

// Settings are the hub's options that choose its broker and secure the
// embedded one, under the names the hub's Options give them (MQTTListen,
// MQTTURL, Group, MQTTCAFile...): the errors of CheckAddress and
// CheckSecurity name those fields, so the hub's Validate returns them as
// they are.
type Settings struct {
	// Listen is the embedded broker's listener (MQTTListen); URL, when
	// set, selects an external broker instead (MQTTURL); Group is its
	// shared subscription group (Group).
	Listen, URL, Group string
	// CAFile, CertFile, KeyFile and ServerName are TLS to an external
	// broker (MQTTCAFile, MQTTCertFile, MQTTKeyFile, MQTTServerName).
	CAFile, CertFile, KeyFile, ServerName string
	// AuthFile, TLSCertFile, TLSKeyFile, TLSClientCAFile and
	// DenyAnonymous secure the embedded broker (MQTTAuthFile,
	// MQTTTLSCertFile, MQTTTLSKeyFile, MQTTTLSClientCAFile,
	// MQTTDenyAnonymous).
	AuthFile, TLSCertFile, TLSKeyFile, TLSClientCAFile string
	DenyAnonymous                                      bool
	// ClientQueue, MaxConnsPerDevice and MaxRetainedBytes bound the
	// embedded broker (MQTTClientQueue, MQTTMaxConnsPerDevice,
	// MQTTMaxRetainedBytes).
	ClientQueue, MaxConnsPerDevice, MaxRetainedBytes int
}

// CheckAddress checks the embedded broker's listen address, or the
// external broker's URL and shared subscription group, and names the
// first bad field ("MQTTListen: ...").
func (s *Settings) CheckAddress() error {
	switch {
	case s.URL == "" && !confval.HostPort(s.Listen):
		return bad("MQTTListen", "%q is not host:port", s.Listen)
	case s.URL != "" && !validURL(s.URL):
		return bad("MQTTURL", "%q is not tcp://, ssl://, tls://, mqtt://, mqtts://, ws:// or wss:// host:port", RedactURL(s.URL))
	case s.Group != "" && !validGroup(s.Group):
		return bad("Group", "%q must be non-empty without '/', '+' or '#'", s.Group)
	case s.Group != "" && s.URL == "":
		return bad("Group", "shared subscriptions need an external broker (MQTTURL)")
	}
	return nil
}

// CheckSecurity checks the TLS and authentication options (each is for
// one kind of broker, and some go in pairs) and the embedded broker's
// bounds, and names the first bad field.
func (s *Settings) CheckSecurity() error {
	embeddedOnly := s.AuthFile != "" || s.TLSCertFile != "" || s.TLSKeyFile != "" ||
		s.TLSClientCAFile != "" || s.DenyAnonymous
	switch {
	case s.URL == "" && (s.CAFile != "" || s.CertFile != "" || s.KeyFile != "" || s.ServerName != ""):
		return bad("MQTTCAFile", "TLS to a broker (MQTTCAFile, MQTTCertFile, MQTTKeyFile, MQTTServerName) needs an external broker (MQTTURL); the embedded one takes MQTTTLSCertFile")
	case (s.CertFile == "") != (s.KeyFile == ""):
		return bad("MQTTCertFile", "MQTTCertFile and MQTTKeyFile go together")
	case s.URL != "" && embeddedOnly:
		return bad("MQTTAuthFile", "broker authentication and TLS options are for the embedded broker; an external broker (MQTTURL) does its own (docs/SECURITY.md)")
	case (s.TLSCertFile == "") != (s.TLSKeyFile == ""):
		return bad("MQTTTLSCertFile", "MQTTTLSCertFile and MQTTTLSKeyFile go together")
	case s.TLSClientCAFile != "" && s.TLSCertFile == "":
		return bad("MQTTTLSClientCAFile", "client certificates need TLS (MQTTTLSCertFile and MQTTTLSKeyFile)")
	case s.DenyAnonymous && s.AuthFile == "" && s.TLSClientCAFile == "":
		return bad("MQTTDenyAnonymous", "no device could connect: set MQTTAuthFile or MQTTTLSClientCAFile")
	case s.ClientQueue < 1 || s.ClientQueue > maxClientQueue:
		return bad("MQTTClientQueue", "%d: want 1..%d", s.ClientQueue, maxClientQueue)
	case s.MaxConnsPerDevice < -1:
		return bad("MQTTMaxConnsPerDevice", "%d: want -1 (no bound) or positive", s.MaxConnsPerDevice)
	case s.MaxRetainedBytes < 1 || s.MaxRetainedBytes > maxMaxRetainedBytes:
		return bad("MQTTMaxRetainedBytes", "%d: want 1..%d", s.MaxRetainedBytes, maxMaxRetainedBytes)
	}
	return nil
}

// bad is the error of a bad field: "field: problem".
func bad(field, format string, args ...any) error {
	return fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...))
}

// validURL reports whether s is a broker URL paho understands.
func validURL(s string) bool {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return false
	}
	switch u.Scheme {
	case "tcp", "ssl", "tls", "mqtt", "mqtts", "ws", "wss":
		return true
	}
	return false
}

// validGroup reports whether g can be a shared subscription group name.
func validGroup(g string) bool {
	for _, c := range g {
		if c == '/' || c == '+' || c == '#' {
			return false
		}
	}
	return g != ""
}
