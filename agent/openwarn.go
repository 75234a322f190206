package agent

import "net"

// warnOpen logs one warning per listener that is reachable beyond this
// machine without a token: HTTP on a non-loopback address with no
// HTTPToken, and UDP on a non-loopback address (line protocol has no
// token at all). Anyone who reaches it can write events as this device.
func (a *Agent) warnOpen() {
	if a.httpLn != nil && a.opts.HTTPToken == "" && !loopbackOnly(a.opts.HTTPAddr) {
		a.log.Warn("agent: HTTP ingest listens beyond loopback without a token: anyone who reaches it can post events and read status; set http-token-file (or listen on 127.0.0.1)",
			"addr", a.opts.HTTPAddr, "setting", "listen")
	}
	if a.udpConn != nil && !loopbackOnly(a.opts.UDPAddr) {
		a.log.Warn("agent: UDP line-protocol ingest listens beyond loopback and takes no token: anyone who reaches it can send events; listen on 127.0.0.1 unless the network is trusted",
			"addr", a.opts.UDPAddr, "setting", "udp-listen")
	}
}

// loopbackOnly reports whether addr (host:port) binds only loopback: a
// loopback IP or "localhost". An empty host or a wildcard binds them all.
func loopbackOnly(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
