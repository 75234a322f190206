package api

import (
	"fmt"
	"strings"
	"time"
)

// Settings are the hub's HTTP options under the names the hub's Options
// give them (HTTPTLSCertFile, HTTPReadToken, HTTPMaxQueries...): the
// errors of Check name those fields, so the hub's Validate returns them
// as they are.
type Settings struct {
	// TLSCertFile and TLSKeyFile serve the API over TLS
	// (HTTPTLSCertFile, HTTPTLSKeyFile).
	TLSCertFile, TLSKeyFile string
	// ReadToken is the bearer token every request must carry
	// (HTTPReadToken).
	ReadToken string
	// ReadTimeout and WriteTimeout bound reading a request and writing a
	// response (HTTPReadTimeout, HTTPWriteTimeout).
	ReadTimeout, WriteTimeout time.Duration
	// MaxRequestBytes bounds a request body (HTTPMaxRequestBytes).
	MaxRequestBytes int64
	// MaxQueries, QueryWait and QueryTimeout configure the query gate
	// (HTTPMaxQueries, HTTPQueryWait, HTTPQueryTimeout).
	MaxQueries              int
	QueryWait, QueryTimeout time.Duration
	// ClusterWait bounds a fanned-out answer's wait for an unowned
	// partition (HTTPClusterWait).
	ClusterWait time.Duration
}

// Check checks the HTTP API's TLS, token and limits and names the first
// bad field ("HTTPReadToken: ...").
func (s *Settings) Check() error {
	switch {
	case (s.TLSCertFile == "") != (s.TLSKeyFile == ""):
		return bad("HTTPTLSCertFile", "HTTPTLSCertFile and HTTPTLSKeyFile go together")
	case s.ReadToken != "" && len(s.ReadToken) < 16:
		return bad("HTTPReadToken", "shorter than 16 characters")
	case strings.ContainsAny(s.ReadToken, " \t\r\n"):
		return bad("HTTPReadToken", "contains white space")
	case s.ReadTimeout <= 0:
		return bad("HTTPReadTimeout", "%v must be positive", s.ReadTimeout)
	case s.WriteTimeout <= 0:
		return bad("HTTPWriteTimeout", "%v must be positive", s.WriteTimeout)
	case s.MaxRequestBytes < 1:
		return bad("HTTPMaxRequestBytes", "%d must be positive", s.MaxRequestBytes)
	case s.MaxQueries < 1 || s.MaxQueries > maxQueries:
		return bad("HTTPMaxQueries", "%d: want 1 to %d", s.MaxQueries, maxQueries)
	case s.QueryWait <= 0 || s.QueryWait > time.Minute:
		return bad("HTTPQueryWait", "%v: want a duration in (0, 1m]", s.QueryWait)
	case s.QueryTimeout <= 0 || s.QueryTimeout > s.WriteTimeout:
		return bad("HTTPQueryTimeout", "%v: want a duration in (0, %v] (the HTTP write timeout)", s.QueryTimeout, s.WriteTimeout)
	case s.ClusterWait < 0 || s.ClusterWait > min(clusterWaitMax, s.QueryTimeout):
		return bad("HTTPClusterWait", "%v: want a duration in [0, %v] (at most a minute and the query timeout)", s.ClusterWait, min(clusterWaitMax, s.QueryTimeout))
	}
	return nil
}

// bad is the error of a bad field: "field: problem".
func bad(field, format string, args ...any) error {
	return fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...))
}
