package agent

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// TestWarnOpenListener checks the one warning per listener reachable beyond
// loopback without a token, naming the address and the setting, and
// silence for loopback or a token.
func TestWarnOpenListener(t *testing.T) {
	for _, tc := range []struct {
		name, http, udp, token string
		want                   []string // settings warned about
	}{
		{"loopback", "127.0.0.1:0", "127.0.0.1:0", "", nil},
		{"http wildcard", "0.0.0.0:0", "", "", []string{"setting=listen"}},
		{"http all hosts", ":0", "off", "", []string{"setting=listen"}},
		{"http with token", "0.0.0.0:0", "", "0123456789abcdef0123", nil},
		{"udp wildcard", "127.0.0.1:0", "0.0.0.0:0", "", []string{"setting=udp-listen"}},
		{"both", "[::]:0", ":0", "", []string{"setting=listen", "setting=udp-listen"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			o := testOptions(t)
			o.HTTPAddr, o.UDPAddr, o.HTTPToken = tc.http, tc.udp, tc.token
			o.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
			a, err := New(o)
			if err != nil {
				t.Fatal(err)
			}
			a.Close()
			text := logs.String()
			got := strings.Count(text, "beyond loopback")
			if got != len(tc.want) {
				t.Fatalf("want %d warnings, got %d:\n%s", len(tc.want), got, text)
			}
			for _, w := range tc.want {
				if !strings.Contains(text, w) || !strings.Contains(text, "addr=") {
					t.Fatalf("want a warning with %s and the address:\n%s", w, text)
				}
			}
		})
	}
}
