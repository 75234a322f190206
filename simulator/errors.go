package simulator

import (
	"errors"
	"fmt"
	"syscall"
)

// errLinkDown is what dialing a device's broker connection gives while its
// simulated link is down.
var errLinkDown = errors.New("simulator: link down")

// errHubDown is what dialing the broker gives during a hub outage: the
// connection refused at once, as by a host whose broker is not running.
var errHubDown = fmt.Errorf("simulator: hub down: %w", syscall.ECONNREFUSED)

// errCut is what reads and writes on a cut connection give: the peer gone,
// as a dead hub or a network that dropped the connection shows it. Not
// the error of a closed socket, which paho takes for its own disconnect
// and ignores, waiting for a keep-alive to fail.
var errCut = fmt.Errorf("simulator: connection cut: %w", syscall.ECONNRESET)

// errAgentGone is what a crashed agent's last dial gives, once the uplink
// that tried it has been stopped.
var errAgentGone = errors.New("simulator: agent crashed")

// errNoLink is what a device's time sources return while its link is down.
var errNoLink = errors.New("simulator: link down")
