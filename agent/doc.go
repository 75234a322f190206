// Package agent is the edge agent: it takes events from local programs
// (HTTP JSON/NDJSON and InfluxDB line protocol over UDP), stamps them with
// the clocksync estimate at capture, stores them durably in a buffer
// stream, and runs the uplink that sends them to the hub, repairing the
// times of events captured before the clock was trusted at send time.
// cmd/edgeagent wires configuration to Options; everything else is here.
//
// # Ingest
//
// POST /v1/events takes a JSON array or NDJSON of
// {"metric","value","ts"?,"tags"?}; ts is RFC 3339 or Unix milliseconds
// and defaults to the capture time (a ts given, even 0001-01-01, is the
// event's own and is checked). A request is parsed and each event stamped
// and checked with the wire's definition of what the hub accepts
// (wire.CheckEvent) before anything is stored: one bad event makes it a
// 400 that names the line (or array element), the field and the reason,
// and nothing of it is taken. So a 2xx means the hub applies every event
// of the request. Strings must be valid UTF-8 (raw, or as \u escapes):
// encoding/json would silently store U+FFFD in their place. The good
// request is one buffer Append, answered with its sequence range once the
// events are as durable as Options.Buffer.Durability promises (the append
// waits for the interval sync).
//
// UDP takes InfluxDB line protocol, one datagram holding one or more
// lines. Each numeric field becomes one event named measurement.field (or
// just measurement for a field called "value"); string fields are skipped.
// A line that does not parse, or that the hub would refuse, is dropped
// alone; both are counted (edgeflow_agent_refused_events_total by reason)
// and logged at most once per Options.LogEvery.
//
// What the hub checks depends on the stamp: a trusted event's corrected
// time must fall in [2000, 2200); an UNTRUSTED one (the clock not synced)
// is kept whatever its time, so the agent takes it, and sends it
// untrusted if repair would give a time the hub refuses.
//
// # Time
//
// An event's device time is its ts, or the capture time; its monotonic time
// is the capture's monotonic time shifted by the same amount, so an event
// stamped before the clock was trusted can still be repaired in the same
// boot. Repair happens at send time through uplink.Options.Retime, and only
// for events stored UNTRUSTED: others are sent as stored, without decoding.
//
// # MQTT connections
//
// The uplink owns its connection and makes a fresh paho client for each
// one (see the uplink package for why), so it cannot lend a client to the
// hub time service. When TimeHub is on, the agent opens a second, small
// connection for time requests only (client id "<uplink client id>-time",
// clean session, QoS 0, paho's own reconnect). It stays up for the life of
// the process, so a device whose NTP servers become unreachable can fall
// back at once; the cost is one idle TCP connection and its keep-alive.
// Options.TimeHub turns it off.
//
// # Shutdown order
//
// When Run's context ends: the HTTP server stops taking requests and waits
// for those in progress (their appends finish); the UDP socket closes; the
// uplink is given up to Options.DrainTimeout to send and get acks for what
// the buffer holds while it is connected; the uplink then publishes its
// offline status and disconnects; the clock and the time connection stop;
// finally the buffer finishes queued appends, syncs and closes. A restart
// resumes from the buffer's acknowledged position.
package agent
