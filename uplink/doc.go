// Package uplink is the agent's half of delivery: it drains a buffer
// stream in batches, publishes them over MQTT at QoS 1 to
// edge/v1/{device}/batch, and acks the buffer only when the hub answers on
// edge/v1/{device}/ack, never on the broker's PUBACK. Delivery is at least
// once; the hub deduplicates by sequence ranges.
//
// # Window and acks
//
// Up to Options.Window batches are in flight. The hub may answer them in
// any order; the buffer is acked cumulatively through the contiguous prefix
// of answered batches only. OK and DUPLICATE mean the hub has the batch;
// REJECTED is logged (rate-limited), counted by reason, and treated as done
// so a bad batch never blocks the stream (recording it is the hub's job).
// A batch not answered within AckTimeout (doubling per resend up to
// MaxAckTimeout) is published again, and so is the whole unanswered window
// after every reconnect. An answer to a batch first published after an
// unanswered one's last publish shows that one was lost on the way (the
// hub reads a device's batches in publish order): it is published again a
// moment later (a tenth of AckTimeout, at most 1 s) instead of after its
// timeout, at most once per AckTimeout per batch, and never against a
// RETRY_LATER answer (fastresend.go; counted in fast_resends_total).
// Resends publish the same frame bytes, so the hub
// sees the same range and send time. After a restart the Uplink starts at
// the buffer's acked position, so what was in flight is read and sent again.
//
// # Connections
//
// Each connection uses a fresh paho client with the same client id and
// CleanSession=false: the broker keeps the session (the ack subscription
// and acks queued while the device was away) across reconnects, while paho
// keeps nothing across them. A reused paho client with CleanSession=false
// keeps the message ids and tokens of unconfirmed publishes across a
// reconnect and resends them from its store; the Uplink resends its window
// itself, so a fresh client per connection leaves one owner of redelivery
// and no leaked message ids. Reconnects are driven here, not by paho's
// auto-reconnect (which has no jitter): attempt k waits a uniform random
// delay in [0, min(BackoffMax, BackoffMin*2^k)], the very first connection
// of the process excepted. A connection that lasted less than BackoffMax
// counts as a failed attempt, so a flapping broker sees growing delays.
// The ack subscription is renewed on every connection, for brokers that
// lost their sessions (e.g. Mosquitto restarted without persistence).
//
// On connect the Uplink publishes a retained Status (online, backlog) on
// edge/v1/{device}/status, refreshes it every StatusInterval, and leaves a
// retained last will with online=false; a clean shutdown publishes
// online=false itself, since a DISCONNECT does not fire the will.
//
// # Paho traps handled deliberately
//
//   - #563, #565: a publish token can complete without error after a
//     reconnect although no PUBACK came. Harmless: tokens free nothing.
//   - #613: tokens can hang. Every wait has a timeout; batch tokens are
//     not waited on at all.
//   - #425: CleanSession defaults to true. Set to false.
//   - #520: no general limit on QoS 1 in flight. The window is the limit.
//   - #208, #453: with OrderMatters a slow handler stalls keep-alives.
//     OrderMatters is off and the handler only hands payloads to a channel.
//
// # Goroutines
//
// Run's goroutine is the send loop: it owns the connection, the window
// and the read position, so none of them needs a lock. An acker goroutine
// owns the buffer's Ack calls, so an fsync there never delays sending.
// Paho's handler goroutines only send payloads to the send loop. Status
// reads a snapshot under a mutex. Run documents the shutdown order.
//
// # Many devices in one process
//
// An Uplink is one MQTT connection. A fleet simulator can run thousands in
// one process: share one Metrics between them (Options.Metrics), raise
// PollInterval and call Notify after appends.
package uplink
