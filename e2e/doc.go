// Package e2e holds the end-to-end tests of edgeflow: real agents (buffer
// plus uplink) against a real hubd process and real MQTT brokers, with
// processes killed by SIGKILL, checking that every event an agent accepted
// is applied by the hub exactly once. It has no non-test code.
package e2e
