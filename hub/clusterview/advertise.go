package clusterview

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"

	"edgeflow/hub/lease"
)

// AdvertiseURL is the default of a hub's advertised API base URL (hubd's
// http-advertise-url), derived from its HTTP listen address (http-addr)
// and whether the API serves TLS (https then):
//
//   - a listen address with a host ("10.0.0.7:8080", "hub-a:8080",
//     "[fd00::7]:8080") advertises that host and port;
//   - one on every interface (":8080", "0.0.0.0:8080", "[::]:8080")
//     advertises this machine's host name (os.Hostname) with the port,
//     which the other hubs reach only if their resolver knows the name
//     (container and Kubernetes networks do; elsewhere set
//     http-advertise-url). Loopback would be wrong there: 127.0.0.1 is
//     every other machine's own address;
//   - a loopback listen address ("127.0.0.1:8080") advertises it, which
//     only hubs on the same machine can reach.
//
// An address without a fixed port (":0"), "off" or a host name that does
// not make a valid URL is an error asking for http-advertise-url.
func AdvertiseURL(listen string, tls bool) (string, error) {
	return advertiseURL(listen, tls, os.Hostname)
}

func advertiseURL(listen string, tls bool, hostname func() (string, error)) (string, error) {
	const fix = "; set http-advertise-url to the URL the other hubs reach this hub's API at"
	if listen == "" || listen == "off" {
		return "", fmt.Errorf("http-addr %q: the API is off, so other hubs cannot ask this one%s", listen, fix)
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", fmt.Errorf("http-addr %q: %v%s", listen, err, fix)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("http-addr %q: port %q is not a fixed port%s", listen, port, fix)
	}
	if ip, err := netip.ParseAddr(host); host == "" || err == nil && ip.IsUnspecified() {
		h, err := hostname()
		if err == nil && h == "" {
			err = errors.New("empty")
		}
		if err != nil {
			return "", fmt.Errorf("http-addr %q listens on every interface and the host name is unknown (%v)%s", listen, err, fix)
		}
		host = h
	}
	scheme := "http"
	if tls {
		scheme = "https"
	}
	u := scheme + "://" + net.JoinHostPort(host, port)
	if err := lease.CheckURL(u); err != nil {
		return "", fmt.Errorf("http-addr %q: derived advertise URL: %v%s", listen, err, fix)
	}
	return u, nil
}
