package broker

import (
	"fmt"
	"testing"
)

// TestSettingsChecks: each broker option rule names its field with the
// hub's option name, and valid settings of either kind of broker pass.
func TestSettingsChecks(t *testing.T) {
	embedded := func(f func(*Settings)) Settings {
		s := Settings{Listen: ":1883", ClientQueue: DefaultClientQueue, MaxConnsPerDevice: 4, MaxRetainedBytes: DefaultMaxRetainedBytes}
		f(&s)
		return s
	}
	external := func(f func(*Settings)) Settings {
		return embedded(func(s *Settings) { s.URL = "ssl://broker:8883"; f(s) })
	}
	none := func(*Settings) {}
	tests := []struct {
		name string
		s    Settings
		want string // "" passes
	}{
		{"embedded", embedded(none), ""},
		{"embedded, secured", embedded(func(s *Settings) {
			s.AuthFile, s.TLSCertFile, s.TLSKeyFile, s.TLSClientCAFile, s.DenyAnonymous = "a", "c", "k", "ca", true
		}), ""},
		{"external with TLS and a group", external(func(s *Settings) {
			s.Group, s.CAFile, s.CertFile, s.KeyFile, s.ServerName = "g", "ca", "c", "k", "n"
			s.Listen = "not an address" // unused with an external broker
		}), ""},
		{"listen", embedded(func(s *Settings) { s.Listen = "localhost:http" }), `MQTTListen: "localhost:http" is not host:port`},
		{"url", external(func(s *Settings) { s.URL = "http://u:secret@broker:80" }),
			`MQTTURL: "http://u:xxxxx@broker:80" is not tcp://, ssl://, tls://, mqtt://, mqtts://, ws:// or wss:// host:port`},
		{"group", external(func(s *Settings) { s.Group = "a/b" }), `Group: "a/b" must be non-empty without '/', '+' or '#'`},
		{"group, embedded", embedded(func(s *Settings) { s.Group = "g" }), "Group: shared subscriptions need an external broker (MQTTURL)"},
		{"external TLS, embedded", embedded(func(s *Settings) { s.ServerName = "n" }),
			"MQTTCAFile: TLS to a broker (MQTTCAFile, MQTTCertFile, MQTTKeyFile, MQTTServerName) needs an external broker (MQTTURL); the embedded one takes MQTTTLSCertFile"},
		{"client cert alone", external(func(s *Settings) { s.CertFile = "c" }), "MQTTCertFile: MQTTCertFile and MQTTKeyFile go together"},
		{"embedded security, external", external(func(s *Settings) { s.DenyAnonymous = true }),
			"MQTTAuthFile: broker authentication and TLS options are for the embedded broker; an external broker (MQTTURL) does its own (docs/SECURITY.md)"},
		{"TLS key alone", embedded(func(s *Settings) { s.TLSKeyFile = "k" }), "MQTTTLSCertFile: MQTTTLSCertFile and MQTTTLSKeyFile go together"},
		{"client CA without TLS", embedded(func(s *Settings) { s.TLSClientCAFile = "ca" }),
			"MQTTTLSClientCAFile: client certificates need TLS (MQTTTLSCertFile and MQTTTLSKeyFile)"},
		{"deny anonymous, no credentials", embedded(func(s *Settings) { s.DenyAnonymous = true }),
			"MQTTDenyAnonymous: no device could connect: set MQTTAuthFile or MQTTTLSClientCAFile"},
		{"client queue", embedded(func(s *Settings) { s.ClientQueue = maxClientQueue + 1 }), fmt.Sprintf("MQTTClientQueue: %d: want 1..%d", maxClientQueue+1, maxClientQueue)},
		{"connections", embedded(func(s *Settings) { s.MaxConnsPerDevice = -2 }), "MQTTMaxConnsPerDevice: -2: want -1 (no bound) or positive"},
		{"retained", embedded(func(s *Settings) { s.MaxRetainedBytes = 0 }), fmt.Sprintf("MQTTMaxRetainedBytes: 0: want 1..%d", maxMaxRetainedBytes)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.s.CheckAddress()
			if err == nil {
				err = tt.s.CheckSecurity()
			}
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.want != "" && (err == nil || err.Error() != tt.want):
				t.Fatalf("got %v, want %s", err, tt.want)
			}
		})
	}
}
