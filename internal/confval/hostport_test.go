package confval

import "testing"

func TestHostPort(t *testing.T) {
	for s, want := range map[string]bool{
		"127.0.0.1:1883": true, ":0": true, "[::1]:65535": true, "host:8080": true,
		"127.0.0.1": false, "h:65536": false, "h:-1": false, "h:+1": false, "h:01": false, "h:x": false, "": false,
	} {
		if got := HostPort(s); got != want {
			t.Errorf("HostPort(%q) = %v, want %v", s, got, want)
		}
	}
}
