package agent

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"edgeflow/clocksync"
	"edgeflow/internal/tlsconf"
	"edgeflow/uplink"
)

// timeConn is the second MQTT connection that carries hub time requests
// (the uplink's clients are private to it; see the package documentation).
type timeConn struct {
	cli   mqtt.Client
	hub   *clocksync.MQTTHub
	clock atomic.Pointer[clocksync.Clock] // polled at once on (re)connect
}

// newTimeConn starts connecting in the background; paho retries and
// reconnects on its own, with a per-process random interval so a fleet
// that lost its broker does not come back in step.
func newTimeConn(o *Options) (*timeConn, error) {
	uo := &o.Uplink
	co := mqtt.NewClientOptions()
	for _, b := range uo.Brokers {
		co.AddBroker(b)
	}
	co.SetClientID(uo.ClientID + "-time")
	co.SetCleanSession(true)
	co.SetOrderMatters(false)
	co.SetKeepAlive(max(uo.KeepAlive, 60*time.Second))
	co.SetConnectTimeout(uo.ConnectTimeout)
	co.SetWriteTimeout(uo.WriteTimeout)
	co.SetAutoReconnect(true)
	co.SetConnectRetry(true)
	jitter := time.Duration(rand.Int64N(int64(10 * time.Second)))
	co.SetConnectRetryInterval(5*time.Second + jitter)
	co.SetMaxReconnectInterval(2*time.Minute + jitter)
	if uo.Username != "" {
		co.SetUsername(uo.Username)
		co.SetPassword(uo.Password)
	}
	if tlsEnabled(uo) {
		c, err := uo.TLS.Config()
		if err != nil {
			return nil, fmt.Errorf("agent: %w", err)
		}
		co.SetTLSConfig(c)
	}
	tc := &timeConn{}
	co.SetOnConnectHandler(func(mqtt.Client) {
		if tc.hub != nil {
			tc.hub.Resubscribe() // a clean session lost the subscription
		}
		if c := tc.clock.Load(); c != nil {
			c.PollSoon()
		}
	})
	tc.cli = mqtt.NewClient(co)
	hub, err := clocksync.NewMQTTHub(tc.cli, o.DeviceID, o.Now, o.Logger)
	if err != nil {
		return nil, err
	}
	tc.hub = hub
	tc.cli.Connect() // with ConnectRetry the token completes once connected; nobody waits
	return tc, nil
}

// close disconnects, giving paho 250 ms to send the DISCONNECT.
func (tc *timeConn) close() { tc.cli.Disconnect(250) }

// tlsEnabled mirrors the uplink's rule: TLS when any TLS option is set or a
// broker URL has a TLS scheme.
func tlsEnabled(uo *uplink.Options) bool {
	return uo.TLS.Enabled() || slices.ContainsFunc(uo.Brokers, tlsconf.Scheme)
}
