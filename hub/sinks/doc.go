// Package sinks keeps systems downstream of the hub in sync with it,
// exactly once: PostgreSQL tables of window results (kind
// postgres_windows) and of corrected events (kind postgres_events), and a
// NATS JetStream stream of window updates with message ids (kind nats).
//
// Every sink follows the hub's log from its own durable position. The
// position lives in the target (a positions table, or a JetStream
// key-value bucket). In PostgreSQL it is written in the same transaction
// as the rows it produced, so after any
// crash of the hub or of the database the sink resumes exactly where the
// committed rows end: nothing is written twice, nothing is skipped. Rows
// are keyed (windows by metric, window, group and start; events by device,
// stream and sequence) and written by upsert, so a replayed transaction
// changes nothing; NATS messages carry an id that JetStream deduplicates,
// so the messages a crash between publish and position republishes are
// dropped. The hub's state is a function of its log, so the results
// a sink derives from the log and the engine after a restart are the ones
// it would have written before.
//
// The package never imports the hub: the hub hands a Sink a Source (its
// applied log position, its log entries as applied events, its event-time
// engine). Config parses the hub's `sinks:` section; New builds a Sink;
// Sink.Run follows the log until its context ends, backing off and
// retrying while its target is down. docs/SINKS.md has the schema and the
// guarantees.
package sinks
