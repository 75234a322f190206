// Package natslog is the fleet's log on NATS JetStream, for the hub's
// cluster mode: one stream captures every device's batches as the NATS
// servers' MQTT listeners publish them, replicated on Options.Replicas
// servers, and split by a subject transform into Options.Partitions
// partitions by device.
//
// # Layout
//
// A device publishes to the MQTT topic edge/v1/{device}/batch, which NATS
// delivers on the subject edge.v1.{token}.batch, where token is the device
// id with every '.' written as "//" (NATS' MQTT mapping; DeviceToken). The
// stream captures BatchSubjects and stores each message under
//
//	edgeflow.log.{partition}.{token}
//
// with partition = fnv32a(token) mod Partitions, computed by the server's
// {{partition(P,1)}} transform and by PartitionOf here. The partition count
// is fixed for the stream's life: changing it would move devices between
// partitions and break the per-device order a reader relies on, so
// EnsureStream refuses a different count with ErrPartitionsChanged.
//
// # Guarantees
//
// A message is in the stream once a quorum of its replicas holds it; a
// Reader returns a partition's messages in stream order with their stream
// sequence and can resume after any sequence. The stream discards new
// messages when full (never old ones that may not be applied yet): a
// batch refused that way was never read back, so the hub never
// acknowledges it and the agent sends it again. NATS' MQTT PUBACK to a
// device says nothing of the stream, which is why only a batch read from
// the stream may be acknowledged.
//
// Checkpoints keeps one record per partition in a replicated KV bucket,
// replaced only by a compare-and-set on its revision, so two writers of
// one partition cannot both succeed.
//
// Snapshots keeps the hub's whole state, with the stream position per
// partition it covers, in an Object Store bucket: a generation becomes
// visible when a pointer in a KV bucket moves to it by compare-and-set,
// after its object is stored; the pointer records each kept generation's
// size and SHA-256, which Latest checks, falling back to an older kept
// generation (and saying so) when the newest is corrupt or missing.
package natslog
