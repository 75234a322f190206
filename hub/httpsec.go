package hub

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"strings"
	"time"

	"edgeflow/hub/api"
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
	case o.HTTPMaxQueries < 1 || o.HTTPMaxQueries > api.MaxQueries:
		return bad("HTTPMaxQueries", "%d: want 1 to %d", o.HTTPMaxQueries, api.MaxQueries)
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
		Handler:           api.Guard(h, s.opts.HTTPReadToken, s.opts.HTTPMaxRequestBytes),
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
