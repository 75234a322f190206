// Package cluster holds the parts of the hub's cluster mode that need
// neither the Server nor its pipeline: the options and their checks, the
// stream's health (ensuring it, polling its fullness, the readiness
// reason, the retention gap check), the per-partition reader loop with
// its reconnect backoff, the state snapshot's encoding and the stream and
// snapshot metrics. Package hub wires them to its pipeline; this package
// never imports it. docs/CLUSTER.md describes cluster mode.
package cluster
