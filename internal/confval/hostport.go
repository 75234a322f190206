package confval

import (
	"net"
	"strconv"
)

// HostPort reports whether s is host:port with a decimal port in
// 0..65535 written without a sign or leading zeros, the form every listen
// address key takes (port 0: pick a free one).
func HostPort(s string) bool {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return false
	}
	p, err := strconv.Atoi(port)
	return err == nil && p >= 0 && p <= 65535 && strconv.Itoa(p) == port
}
