package clusterview

import (
	"errors"
	"strings"
	"testing"
)

// TestAdvertiseURL: a listen address with a host advertises it; one on
// every interface the host name; TLS makes it https; "off", ":0" and an
// unknown host name are errors naming http-advertise-url.
func TestAdvertiseURL(t *testing.T) {
	host := func() (string, error) { return "hub-a.internal", nil }
	for _, tc := range []struct {
		listen string
		tls    bool
		want   string
	}{
		{":8080", false, "http://hub-a.internal:8080"},
		{"0.0.0.0:8080", true, "https://hub-a.internal:8080"},
		{"[::]:9000", false, "http://hub-a.internal:9000"},
		{"10.0.0.7:8080", false, "http://10.0.0.7:8080"},
		{"[fd00::7]:8080", false, "http://[fd00::7]:8080"},
		{"127.0.0.1:8080", false, "http://127.0.0.1:8080"},
		{"hub-b:80", true, "https://hub-b:80"},
	} {
		got, err := advertiseURL(tc.listen, tc.tls, host)
		if err != nil || got != tc.want {
			t.Errorf("%q tls=%v: %q %v, want %q", tc.listen, tc.tls, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		listen string
		host   func() (string, error)
	}{
		{"off", host}, {"", host}, {":0", host}, {"8080", host}, {":http", host},
		{":8080", func() (string, error) { return "", errors.New("no name") }},
		{":8080", func() (string, error) { return "", nil }},
		{":8080", func() (string, error) { return "bad host", nil }},
	} {
		if got, err := advertiseURL(tc.listen, false, tc.host); err == nil || !strings.Contains(err.Error(), "http-advertise-url") {
			t.Errorf("%q: %q %v, want an error naming http-advertise-url", tc.listen, got, err)
		}
	}
	if u, err := AdvertiseURL(":8080", false); err != nil {
		t.Logf("this machine: %v", err)
	} else {
		t.Logf("this machine advertises %s for :8080", u)
	}
}
