// Package hub is the server side of edgeflow's delivery path: it receives
// batches from the fleet over MQTT, validates them, deduplicates them by the
// sequence ranges already applied per stream, writes accepted batches to a
// write-ahead log on Badger with group commit, acknowledges them only once
// they are durable, and applies them to in-memory state (the device registry
// and the Consumers, such as the event-time engine).
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
// # Storage layout (one Badger directory)
//
//	w<walSeq:8><serverTimeNs:8>      -> log entry (metadata + payload as received)
//	r<device>\x00<streamID:16>       -> applied sequence ranges, horizon and last-seen time of the stream
//	c                                -> newest checkpoint pointer (position, chunks, CRC-32Cs)
//	c1                               -> the checkpoint before it (see checkpoint.go)
//	k<gen:8><chunk:4>                -> checkpoint state chunks of both
//	t<device>\x00<level:1><bucketStart:8><walSeq:8><serverTimeNs:8> -> empty: the
//	                                    event-time index of batch entries (see eventindex.go)
//	i                                -> empty: the event-time index covers the whole log
//	                                    (e<device>\x00... and s, the arrival index before
//	                                    it, are deleted when an old store's index is built)
//	x<recordedAtNs:8>                -> a recorded loss to store damage (see damage.go)
//	a<gen:8><series:4><bucket:8>     -> evicted aggregate partial, base resolution
//	d<gen:8><tier:1><series:4><bucket:8> -> downsampled aggregate partial (see partials.go)
//
// The applied ranges and the event-time index keys are written in the same
// transaction as the log entries that produced them, so the dedup state and
// the index are never ahead of or behind the log; a stream retired after
// Options.StreamIdleExpiry has its ranges key deleted in the transaction of
// its retirement entry (streamcap.go).
// Everything else the hub holds in memory (registry, consumer state) is a
// function of the log: a restart loads the newest usable checkpoint and
// replays the log entries after its position through the same apply path.
// Retention keeps the log after the older checkpoint, so a damaged newest
// one costs a longer replay, not data.
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
