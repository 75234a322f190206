// Package timeservice answers agents' time requests over MQTT, NTP style,
// for agents that cannot reach an NTP server. It needs only a clock and a
// publish function, so it stands apart from the hub, which uses it as its
// default time request handler.
package timeservice
