package api

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestHTTPBodyLimit: a request body beyond HTTPMaxRequestBytes cannot be
// read in full by a handler.
func TestHTTPBodyLimit(t *testing.T) {
	var got int
	var readErr error
	h := Guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		got, readErr = len(b), err
	}), "", 1024)
	req := httptest.NewRequest("POST", "/x", strings.NewReader(strings.Repeat("a", 4096)))
	h.ServeHTTP(httptest.NewRecorder(), req)
	if readErr == nil || got > 1024 {
		t.Fatalf("read %d bytes, err %v: want an error at 1024", got, readErr)
	}
}
