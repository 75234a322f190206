package agent

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
)

// guardHTTP requires "Authorization: Bearer <token>" on every path but
// /healthz when token is set. The refusal never echoes what was sent.
func guardHTTP(h http.Handler, token string) http.Handler {
	if token == "" {
		return h
	}
	want := sha256.Sum256([]byte(token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			sum := sha256.Sum256([]byte(got))
			if !ok || subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="edgeflow-agent"`)
				writeJSON(w, http.StatusUnauthorized, errorBody{"missing or wrong bearer token"})
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}
