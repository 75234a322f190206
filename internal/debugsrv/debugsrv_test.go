package debugsrv

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
)

func TestStartServesProfiles(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	bound, stop, err := Start("", log, nil)
	if err != nil || bound != "" {
		t.Fatalf("empty address: %q %v", bound, err)
	}
	stop()
	if _, _, err := Start("127.0.0.1:not-a-port", log, nil); err == nil || !strings.Contains(err.Error(), "pprof listener") {
		t.Fatalf("bad address: %v", err)
	}
	extra := map[string]http.Handler{"/metrics": http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "m 1\n") })}
	bound, stop, err = Start("127.0.0.1:0", log, extra)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	resp, err := http.Get("http://" + bound + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "goroutine profile") {
		t.Fatalf("status %d body %.200s", resp.StatusCode, body)
	}
	if resp, err = http.Get("http://" + bound + "/metrics"); err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "m 1\n" {
		t.Fatalf("extra handler: %q", body)
	}
}
