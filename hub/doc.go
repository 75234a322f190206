// Package hub is the server side of edgeflow's delivery path: it receives
// batches from the fleet over MQTT, validates them, deduplicates them by the
// sequence ranges already applied per stream, writes accepted batches to a
// write-ahead log on Badger with group commit, acknowledges them only once
// they are durable, and applies them to in-memory state (the device registry
// and the Consumers, such as the event-time engine).
//
// # Packages
//
// The root package keeps the Server, its Options, the pipeline below and
// recovery; each other concern is a package under hub/ that never imports
// this one: registry (what the hub knows of each device, and its
// checkpoint snapshot), hublog (the store and every Badger key),
// batchview (parsing and validating batches), eventtime (an event's
// corrected time and the event-time index over the log), broker (the MQTT
// side), natsbus and natslog (cluster mode's NATS transport and stream),
// cluster (cluster mode's options, stream health, partition readers and
// state snapshot encoding), api (the HTTP handlers over a Backend the
// Server implements) and hubapi (the API's JSON types, for clients),
// with membudget (the sizes derived from the memory budget), ranges,
// clockest, ratelimit and timeservice.
//
// # Pipeline
//
// A Transport (the embedded mochi-mqtt broker or an external broker through
// paho) hands every message to the Server. Batches go to one of a few decode
// workers, chosen by a hash of the device so a device's batches stay in
// order; a worker unframes, parses and validates a batch without allocating
// per event. The committer goroutine owns the dedup state: it classifies
// each batch (new, duplicate, partially new, rejected), writes the new ones
// and their streams' applied ranges in one Badger transaction per group,
// calls Sync once per group, and then hands the group on: acks to the ack
// publisher, log entries to the applier, which owns the registry and calls
// the Consumers in log order. The applier may fall behind by up to
// applyLagBytes of payload (while it encodes a checkpoint, for one) before
// the committer waits for it: acks do not wait for the applier.
//
// In cluster mode (Options.NATS, cluster.go) batches come instead from a
// NATS JetStream stream, one reader per partition feeding the worker of
// its partition, and the committer also writes each partition's position
// in the group's transaction; natsbus is the transport for statuses, time
// requests and acks. The applier records the last stream sequence of each
// partition it applied, and every NATS.SnapshotInterval the state,
// those positions and the partials it refers to go into NATS' object store
// (cluster_snapshot.go); a hub started on an empty data directory restores
// them and reads each partition after its position.
//
// # Storage
//
// The log, the applied ranges, the checkpoints, the event-time index,
// the stored aggregate partials and the damage records live in one Badger
// directory, owned by package hublog, whose doc shows every key. The
// applied ranges and the event-time index keys (package eventtime) are
// written in the same transaction as the log entries that produced them,
// so the dedup state and the index are never ahead of or behind the log.
// Everything else the hub holds in memory (registry, consumer state) is a
// function of the log: a restart loads the newest usable checkpoint and
// replays the log entries after its position through the same apply path.
// A stream retired after Options.StreamIdleExpiry has its ranges key
// deleted in the transaction of its retirement entry (streamcap.go).
//
// # Partial overlap
//
// A batch whose range is partly applied already is accepted: only the new
// sequence numbers are applied (the log entry records which), and the ack
// says OK for the whole batch, since all of it is now durable on the hub. A
// batch that is fully covered is acknowledged DUPLICATE and changes nothing.
//
// # Shutdown order
//
// Stop the transport (no new batches), drain the decode workers, let the
// committer write and sync what it holds, let the applier apply it and the
// ack publisher send the acks, write a checkpoint, close Badger, close the
// transport's broker.
package hub
