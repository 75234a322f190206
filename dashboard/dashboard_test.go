package dashboard

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func TestHandlerServes(t *testing.T) {
	h := Handler()
	tests := []struct {
		path  string
		code  int
		want  string // in the body
		ctype string
	}{
		{"/", 200, "<title>edgeflow hub</title>", "text/html"},
		{"/dashboard/app.js", 200, "v1/stream", "text/javascript"},
		{"/dashboard/style.css", 200, "--final", "text/css"},
		{"/dashboard/", 404, "", ""},
		{"/dashboard/index.html", 404, "", ""},
		{"/dashboard/nope.js", 404, "", ""},
		{"/elsewhere", 404, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tt.path, nil))
			body, _ := io.ReadAll(rec.Body)
			if rec.Code != tt.code || !strings.Contains(string(body), tt.want) {
				t.Fatalf("GET %s: %d, want %d with %q", tt.path, rec.Code, tt.code, tt.want)
			}
			if tt.ctype != "" && !strings.HasPrefix(rec.Header().Get("Content-Type"), tt.ctype) {
				t.Errorf("Content-Type %q, want %s", rec.Header().Get("Content-Type"), tt.ctype)
			}
		})
	}
}

// TestNoExternalResources keeps the page usable on an offline hub: every
// asset it loads is the hub's own, by a relative URL.
func TestNoExternalResources(t *testing.T) {
	ref := regexp.MustCompile(`(?:src|href)="([^"]*)"|url\(([^)]*)\)|@import`)
	for _, name := range []string{"assets/index.html", "assets/style.css", "assets/app.js"} {
		b, err := assets.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ref.FindAllStringSubmatch(string(b), -1) {
			u := m[1] + m[2]
			if m[0] == "@import" || strings.Contains(u, "//") || strings.HasPrefix(u, "/") {
				t.Errorf("%s loads %q: use a relative URL to an embedded asset", name, m[0])
			}
		}
	}
}
