package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
	"time"
)

// unauthenticatedPaths answer without a token: probes carry none.
var unauthenticatedPaths = map[string]bool{"/healthz": true, "/readyz": true}

// dashboardAsset reports whether r asks for the dashboard's page or one of
// its static files (package dashboard: "/" and /dashboard/...). They hold
// no data, and a browser cannot send a bearer token when it loads a page:
// the page takes the token from the user and sends it with every API call.
func dashboardAsset(r *http.Request) bool {
	return (r.Method == http.MethodGet || r.Method == http.MethodHead) &&
		(r.URL.Path == "/" || strings.HasPrefix(r.URL.Path, "/dashboard/"))
}

// streamingPaths write for as long as the client listens.
var streamingPaths = map[string]bool{"/v1/stream": true}

// Guard checks the bearer token (when token is set), bounds request
// bodies and lifts the write timeout for streaming paths. A refusal never
// echoes what the client sent.
func Guard(h http.Handler, token string, maxBody int64) http.Handler {
	want := sha256.Sum256([]byte(token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Attribute writes carry the write token instead, which their
		// handler checks (checkWriteToken).
		if token != "" && !unauthenticatedPaths[r.URL.Path] && !dashboardAsset(r) && !attrWriteRequest(r) {
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			sum := sha256.Sum256([]byte(got))
			if !ok || subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="edgeflow"`)
				writeError(w, http.StatusUnauthorized, "missing or wrong bearer token")
				return
			}
		}
		if r.Body != nil {
			r.Body = http.MaxBytesReader(w, r.Body, maxBody)
		}
		if streamingPaths[r.URL.Path] {
			// The read deadline too: when it passes, the server's
			// background read cancels the request's context.
			rc := http.NewResponseController(w)
			_ = rc.SetReadDeadline(time.Time{})
			_ = rc.SetWriteDeadline(time.Time{})
		}
		h.ServeHTTP(w, r)
	})
}
