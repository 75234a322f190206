package hub

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"time"

	"edgeflow/hub/api"
)

// httpSettings are the options that api.Settings checks.
func (o *Options) httpSettings() *api.Settings {
	return &api.Settings{TLSCertFile: o.HTTPTLSCertFile, TLSKeyFile: o.HTTPTLSKeyFile, ReadToken: o.HTTPReadToken,
		ReadTimeout: o.HTTPReadTimeout, WriteTimeout: o.HTTPWriteTimeout, MaxRequestBytes: o.HTTPMaxRequestBytes,
		MaxQueries: o.HTTPMaxQueries, QueryWait: o.HTTPQueryWait, QueryTimeout: o.HTTPQueryTimeout,
		ClusterWait: o.HTTPClusterWait}
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
