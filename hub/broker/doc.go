// Package broker is the hub's side of MQTT: the Transport the hub receives
// batches through and publishes acks on. It holds the embedded broker
// (mochi-mqtt, imported nowhere else) with its hand-off of batches straight
// to the hub, the external broker reached over paho, device authentication
// (credentials file, client certificates, the per-device topic ACL), the
// throttle on password checks, and the policy on retained messages.
//
// The root hub package picks a Transport from its Options and hands it a
// MessageHandler; its Validate checks the broker options through
// Settings. This package imports nothing of the hub.
package broker
