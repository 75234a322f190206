package api

import (
	"testing"
	"time"
)

// TestSettingsCheck: each HTTP option rule names its field with the hub's
// option name, and the defaults pass.
func TestSettingsCheck(t *testing.T) {
	ok := func(f func(*Settings)) Settings {
		s := Settings{ReadTimeout: 30 * time.Second, WriteTimeout: 2 * time.Minute, MaxRequestBytes: 64 << 10,
			MaxQueries: 1, QueryWait: time.Second, QueryTimeout: 30 * time.Second}
		f(&s)
		return s
	}
	tests := []struct {
		name string
		s    Settings
		want string // "" passes
	}{
		{"defaults", ok(func(*Settings) {}), ""},
		{"TLS and a token", ok(func(s *Settings) { s.TLSCertFile, s.TLSKeyFile, s.ReadToken = "c", "k", "0123456789abcdef" }), ""},
		{"key alone", ok(func(s *Settings) { s.TLSKeyFile = "k" }), "HTTPTLSCertFile: HTTPTLSCertFile and HTTPTLSKeyFile go together"},
		{"short token", ok(func(s *Settings) { s.ReadToken = "short" }), "HTTPReadToken: shorter than 16 characters"},
		{"token with a space", ok(func(s *Settings) { s.ReadToken = "0123456789 abcdef" }), "HTTPReadToken: contains white space"},
		{"read timeout", ok(func(s *Settings) { s.ReadTimeout = 0 }), "HTTPReadTimeout: 0s must be positive"},
		{"write timeout", ok(func(s *Settings) { s.WriteTimeout = -time.Second }), "HTTPWriteTimeout: -1s must be positive"},
		{"body bound", ok(func(s *Settings) { s.MaxRequestBytes = 0 }), "HTTPMaxRequestBytes: 0 must be positive"},
		{"queries", ok(func(s *Settings) { s.MaxQueries = maxQueries + 1 }), "HTTPMaxQueries: 1025: want 1 to 1024"},
		{"query wait", ok(func(s *Settings) { s.QueryWait = 2 * time.Minute }), "HTTPQueryWait: 2m0s: want a duration in (0, 1m]"},
		{"query timeout", ok(func(s *Settings) { s.QueryTimeout = 3 * time.Minute }), "HTTPQueryTimeout: 3m0s: want a duration in (0, 2m0s] (the HTTP write timeout)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.s.Check()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.want != "" && (err == nil || err.Error() != tt.want):
				t.Fatalf("got %v, want %s", err, tt.want)
			}
		})
	}
}
