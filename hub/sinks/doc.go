// Package sinks keeps systems downstream of the hub in sync with it:
// PostgreSQL tables of window results (kind postgres_windows, session
// windows included) and of corrected events (kind postgres_events),
// exactly once; a NATS JetStream stream (kind nats) and an MQTT broker
// (kind mqtt, QoS 1, at least once) of window updates and, optionally,
// the merged event stream, each message with an id to deduplicate by.
//
// Every sink follows the hub's log from its own durable position. The
// position lives in the target (a positions table, a JetStream key-value
// bucket, a retained MQTT message). In PostgreSQL it is written in the
// same transaction as the rows it produced, so after any crash of the hub
// or of the database the sink resumes exactly where the committed rows
// end: nothing is written twice, nothing is skipped. Rows are keyed
// (windows by metric, window, group and start; events by device, stream
// and sequence) and written by upsert, so a replayed transaction changes
// nothing; messages carry an id (JetStream drops duplicates by it, MQTT
// consumers do), so the messages a crash between publish and position
// republishes are dropped. The hub's state is a function of its log, so
// the results a sink derives from the log and the engine after a restart
// are the ones it would have written before.
//
// A sink never skips log entries: when retention deleted entries it had
// not written (it was more than the hub's sink-max-lag behind), it is
// marked broken with the gap and stops there. Its lag is reported in
// entries, bytes and seconds of event time.
//
// The package never imports the hub: the hub hands a Sink a Source (its
// applied log position, its log entries as applied events, their sizes,
// its event-time engine). Config parses the hub's `sinks:` section; New
// builds a Sink; Sink.Run follows the log until its context ends, backing
// off and retrying while its target is down. docs/SINKS.md has the schema
// and the guarantees.
package sinks
