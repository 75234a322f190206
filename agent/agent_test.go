package agent

import (
	"net"
	"testing"
)

// TestNewFailureReleases checks that New, failing after it opened the
// buffer (here: the HTTP address is taken), returns an error rather than
// panicking and closes the buffer, so a retry can open the directory.
func TestNewFailureReleases(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	o := testOptions(t)
	o.HTTPAddr = ln.Addr().String()
	if a, err := New(o); err == nil || a != nil {
		t.Fatalf("New on a taken address: %v, %v", a, err)
	}
	o.HTTPAddr = "127.0.0.1:0"
	a, err := New(o)
	if err != nil {
		t.Fatalf("New after a failed New: %v", err)
	}
	a.Close()
}
