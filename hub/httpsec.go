package hub

import (
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// validateHTTPSecurity checks the HTTP API's TLS, token and limits.
func (o *Options) validateHTTPSecurity(bad func(field, format string, args ...any) error) error {
	switch {
	case (o.HTTPTLSCertFile == "") != (o.HTTPTLSKeyFile == ""):
		return bad("HTTPTLSCertFile", "HTTPTLSCertFile and HTTPTLSKeyFile go together")
	case o.HTTPReadToken != "" && len(o.HTTPReadToken) < 16:
		return bad("HTTPReadToken", "shorter than 16 characters")
	case strings.ContainsAny(o.HTTPReadToken, " \t\r\n"):
		return bad("HTTPReadToken", "contains white space")
	case o.HTTPReadTimeout <= 0:
		return bad("HTTPReadTimeout", "%v must be positive", o.HTTPReadTimeout)
	case o.HTTPWriteTimeout <= 0:
		return bad("HTTPWriteTimeout", "%v must be positive", o.HTTPWriteTimeout)
	case o.HTTPMaxRequestBytes < 1:
		return bad("HTTPMaxRequestBytes", "%d must be positive", o.HTTPMaxRequestBytes)
	case o.HTTPMaxQueries < 1 || o.HTTPMaxQueries > maxHTTPQueries:
		return bad("HTTPMaxQueries", "%d: want 1 to %d", o.HTTPMaxQueries, maxHTTPQueries)
	case o.HTTPQueryWait <= 0 || o.HTTPQueryWait > time.Minute:
		return bad("HTTPQueryWait", "%v: want a duration in (0, 1m]", o.HTTPQueryWait)
	case o.HTTPQueryTimeout <= 0 || o.HTTPQueryTimeout > o.HTTPWriteTimeout:
		return bad("HTTPQueryTimeout", "%v: want a duration in (0, %v] (the HTTP write timeout)", o.HTTPQueryTimeout, o.HTTPWriteTimeout)
	}
	return nil
}

// newHTTPServer wraps h with the token check and the request limits and
// sets the server's timeouts; TLS when configured.
func (s *Server) newHTTPServer(h http.Handler) (*http.Server, error) {
	srv := &http.Server{
		Handler:           guardHTTP(h, s.opts.HTTPReadToken, s.opts.HTTPMaxRequestBytes),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       s.opts.HTTPReadTimeout,
		WriteTimeout:      s.opts.HTTPWriteTimeout,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
	if s.opts.HTTPTLSCertFile != "" {
		cert, err := tls.LoadX509KeyPair(s.opts.HTTPTLSCertFile, s.opts.HTTPTLSKeyFile)
		if err != nil {
			return nil, fmt.Errorf("http tls cert/key: %w", err)
		}
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	return srv, nil
}

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

// guardHTTP checks the bearer token (when token is set), bounds request
// bodies and lifts the write timeout for streaming paths. A refusal never
// echoes what the client sent.
func guardHTTP(h http.Handler, token string, maxBody int64) http.Handler {
	want := sha256.Sum256([]byte(token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if token != "" && !unauthenticatedPaths[r.URL.Path] && !dashboardAsset(r) {
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
