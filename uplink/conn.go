package uplink

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"edgeflow/internal/mqttdial"
	"edgeflow/wire"
)

// wait waits for a paho token with a timeout. Paho tokens can hang forever
// (paho #613), so no token is ever waited on without one.
func wait(ctx context.Context, tok mqtt.Token, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-tok.Done():
		return tok.Error()
	case <-t.C:
		return errTokenTimeout
	case <-ctx.Done():
		return ctx.Err()
	}
}

// connectLoop connects, waiting a jittered backoff before every attempt
// except the very first of the process. It returns only once connected or
// when ctx ends.
func (u *Uplink) connectLoop(ctx context.Context, acks chan uint64) error {
	for {
		if u.everUp || u.fails > 0 {
			d := backoff(u.fails, u.opts.BackoffMin, u.opts.BackoffMax, u.rnd)
			u.setState(StateBackoff, nil)
			if err := u.sleep(ctx, d, acks); err != nil {
				return err
			}
		}
		u.setState(StateConnecting, nil)
		err := u.connect(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		u.fails++
		u.m.ConnectFailures.Inc()
		u.setState(StateBackoff, err)
		u.warn(&u.warnLog, "uplink: connect failed", "attempt", u.fails, "err", err)
	}
}

// sleep waits d, still applying acks that arrive from the last connection.
func (u *Uplink) sleep(ctx context.Context, d time.Duration, acks chan uint64) error {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return nil
		case p := <-u.acks:
			u.onAck(p, acks)
		}
	}
}

// connect opens one connection with a fresh paho client, subscribes to the
// ack topic, publishes the online status and queues every batch in flight
// for publishing again.
func (u *Uplink) connect(ctx context.Context) error {
	o := u.clientOptions()
	lost := make(chan error, 1)
	o.SetConnectionLostHandler(func(_ mqtt.Client, err error) {
		select {
		case lost <- err:
		default:
		}
	})
	cli := mqtt.NewClient(o)
	if err := wait(ctx, cli.Connect(), u.opts.ConnectTimeout+time.Second); err != nil {
		cli.Disconnect(0)
		return fmt.Errorf("connect to %v: %w", u.opts.Brokers, err)
	}
	// Subscribe on every connection. With a session the broker kept
	// (CleanSession=false), this is a no-op and acks queued while we were
	// away arrive on the default handler even before it; a broker that lost
	// its sessions (restarted without persistence) needs it. At AckQoS 0
	// the broker queues no acks while we are away; resends cover them.
	sub := cli.Subscribe(u.ackTopic, u.opts.ackQoS(), u.onMessage)
	if err := wait(ctx, sub, u.opts.ConnectTimeout); err != nil {
		cli.Disconnect(0)
		return fmt.Errorf("subscribe to %s: %w", u.ackTopic, err)
	}
	if st, ok := sub.(*mqtt.SubscribeToken); ok {
		if qos, found := st.Result()[u.ackTopic]; found && qos > 2 {
			cli.Disconnect(0)
			return fmt.Errorf("subscribe to %s: refused by the broker (code 0x%02x)", u.ackTopic, qos)
		}
	}
	u.conn = &conn{cli: cli, lost: lost, up: time.Now()}
	if u.everUp {
		u.m.Reconnects.Inc()
		u.mu.Lock()
		u.snap.Reconnects++
		u.mu.Unlock()
	}
	u.everUp = true
	u.m.Connected.Inc()
	u.setState(StateConnected, nil)
	u.publishStatus()
	// Resend the window after a reconnect: whatever was in flight may have
	// been lost with the old connection (and its PUBACK state with the old
	// client). The hub deduplicates what it already has.
	for _, f := range u.win.q {
		if !f.done {
			f.queued, f.fast = true, false
		}
	}
	return nil
}

// clientOptions builds paho's options for one connection.
func (u *Uplink) clientOptions() *mqtt.ClientOptions {
	o := mqtt.NewClientOptions()
	for _, b := range u.opts.Brokers {
		o.AddBroker(b)
	}
	o.SetClientID(u.opts.ClientID)
	// Paho trap #425: CleanSession defaults to true, and then the broker
	// drops our session (the ack subscription and the acks queued for us
	// while offline) at every reconnect. A stable client id plus
	// CleanSession=false keeps them.
	o.SetCleanSession(false)
	// Reconnects are ours (connectLoop), with full jitter: paho's own
	// auto-reconnect and ConnectRetry back off without jitter, so a fleet
	// that lost a broker would come back in lockstep.
	o.SetAutoReconnect(false)
	o.SetConnectRetry(false)
	// Paho traps #208 and #453: with OrderMatters (the default) every
	// message handler runs on paho's router goroutine, and a slow one
	// stalls keep-alives until the broker drops us. Handlers here only
	// hand the payload to a channel, and run concurrently.
	o.SetOrderMatters(false)
	o.SetResumeSubs(false)
	o.SetKeepAlive(u.opts.KeepAlive)
	o.SetPingTimeout(min(u.opts.KeepAlive, 10*time.Second))
	o.SetConnectTimeout(u.opts.ConnectTimeout)
	o.SetWriteTimeout(u.opts.WriteTimeout)
	// A new connection id for this connection's will and statuses, so the
	// hub can tell an old connection's will (which a broker taking the
	// session over may publish after this connection's online status)
	// from this one's.
	u.connID = rand.Uint64() | 1
	o.SetBinaryWill(wire.StatusTopic(u.opts.DeviceID), u.statusPayload(false), 1, true)
	o.SetDefaultPublishHandler(u.onMessage)
	if u.opts.Username != "" {
		o.SetUsername(u.opts.Username)
		o.SetPassword(u.opts.Password)
	}
	if u.tlsConf != nil {
		o.SetTLSConfig(u.tlsConf.Clone())
	}
	// Buffered reads (internal/mqttdial): paho reads each packet with three
	// to six read calls otherwise. Options.Dial (the fleet simulator's
	// cuttable sockets) goes through the same function.
	if u.opts.Dial != nil || mqttdial.Handles(u.opts.Brokers) {
		o.SetCustomOpenConnectionFn(mqttdial.Open(mqttdial.DialFunc(u.opts.Dial), u.opts.ConnectTimeout))
	}
	return o
}

// onMessage is paho's handler for the ack topic (and the default handler,
// which gets acks a kept session delivers before Subscribe returns). It
// must stay tiny (paho #208, #453): it hands the payload to the send loop.
// The hub never retains an ack, so a retained one (a stale or forged
// message a broker kept) is dropped: it could free batches the hub never
// applied.
func (u *Uplink) onMessage(_ mqtt.Client, m mqtt.Message) {
	if m.Topic() != u.ackTopic || m.Retained() {
		return
	}
	select {
	case u.acks <- m.Payload():
	case <-u.stop:
	}
}

// connectionLost forgets the dead connection. A connection that lasted
// less than BackoffMax counts as a failed attempt, so a broker that accepts
// and drops us at once sees growing delays rather than a tight loop.
func (u *Uplink) connectionLost(err error) {
	if time.Since(u.conn.up) >= u.opts.BackoffMax {
		u.fails = 0
	} else {
		u.fails++
	}
	u.conn = nil
	u.m.Connected.Dec()
	u.setState(StateBackoff, err)
	u.warn(&u.warnLog, "uplink: connection lost", "err", err)
}

// publishStatus publishes the retained online status with backlog figures.
// It does not wait for the PUBACK: the next refresh supersedes it anyway.
func (u *Uplink) publishStatus() {
	u.conn.cli.Publish(wire.StatusTopic(u.opts.DeviceID), 1, true, u.statusPayload(true))
	u.statusDue = time.Now().Add(u.opts.StatusInterval)
}

// disconnect drops the connection without ceremony.
func (u *Uplink) disconnect() {
	if u.conn == nil {
		return
	}
	u.conn.cli.Disconnect(0)
	u.conn = nil
	u.m.Connected.Dec()
}

// shutdown replaces the retained status with online=false (a clean
// DISCONNECT does not fire the last will) and disconnects.
func (u *Uplink) shutdown() {
	if u.conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), u.opts.ConnectTimeout)
	defer cancel()
	tok := u.conn.cli.Publish(wire.StatusTopic(u.opts.DeviceID), 1, true, u.statusPayload(false))
	if err := wait(ctx, tok, u.opts.ConnectTimeout); err != nil {
		u.log.Warn("uplink: offline status not confirmed", "err", err)
	}
	u.conn.cli.Disconnect(250)
	u.conn = nil
	u.m.Connected.Dec()
}
