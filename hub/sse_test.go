package hub

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestShutdownEndsOpenStreams checks that an open GET /v1/stream (a
// dashboard left open) does not hold up Shutdown until its deadline.
func TestShutdownEndsOpenStreams(t *testing.T) {
	s := startHub(t, aggTestOptions(t, t.TempDir()))
	resp, err := http.Get("http://" + s.HTTPAddr() + "/v1/stream?metric=temp")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if line, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil || !strings.HasPrefix(line, ":") {
		t.Fatalf("stream's first line %q: %v", line, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown with an open stream: %v after %v", err, time.Since(start))
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("shutdown took %v with an open stream", took)
	}
}
