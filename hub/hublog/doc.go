// Package hublog is the hub's store: its write-ahead log and everything
// else it keeps in one Badger directory. It defines every key (keys.go),
// the log entry (Entry, with its encoding), the store (OpenStore, Store:
// replay, the dedup state, checkpoints, retention helpers), the key codecs
// of the event-time index (its buckets and the one-time build are package
// hub/eventtime's: they need a batch's corrected event times), the
// stored aggregate partials (BadgerPartials), the records of losses to
// store damage (LogDamage, DamageRecord) and the classified
// errors an operator acts on (ErrCorrupt, ErrStoreLocked, ErrStoreDamaged,
// ErrLogDamaged; their messages say "hub:" because the operator reads them
// as the hub's).
//
// The root hub package drives it: the committer writes log entries and
// ranges in one transaction, the applier replays them, recovery loads
// checkpoints and damage records. This package imports nothing of the hub.
//
// # Storage layout (one Badger directory)
//
//	w<walSeq:8><serverTimeNs:8>      -> log entry (metadata + payload as received)
//	r<device>\x00<streamID:16>       -> applied sequence ranges, horizon and last-seen time of the stream
//	c                                -> newest checkpoint pointer (position, chunks, CRC-32Cs)
//	c1                               -> the checkpoint before it (checkpoint.go)
//	k<gen:8><chunk:4>                -> checkpoint state chunks of both
//	x<recordedAtNs:8>                -> a recorded loss to store damage (damage.go)
//	t<device>\x00<level:1><bucketStart:8><walSeq:8><serverTimeNs:8> -> event-time index key, no value
//	                                    (catch-all level: the latest event time, 8 bytes)
//	i                                -> the event-time index covers the whole log
//	(e<device>..., s: the arrival index before it, deleted when the event-time index is built)
//	a<gen:8><series:4><bucket:8>     -> evicted aggregate partial, base resolution
//	d<gen:8><tier:1><series:4><bucket:8> -> downsampled aggregate partial (partials.go)
//	p<stream>\x00<partition:4>       -> cluster mode: the last stream sequence of the partition
//	                                    committed here (8 bytes; positions.go)
//	l<alertSeq:8>                    -> an alert change (the alert's JSON at that revision) not yet
//	                                    delivered by every alert output (alertlog.go)
//	o<outputName>                    -> the alert change sequence the output delivered up to (8 bytes)
//	b<streamSeq:8><serverTimeNs:8>   -> cluster mode: a log entry backfilled from the stream after a
//	                                    snapshot restore, never replayed (backfill.go); its event-time
//	                                    index keys name it by BackfillSeq(streamSeq)
//	fP                               -> the backfill's plan and progress (BackfillPlan, JSON)
//	fL<device>\x00<streamID:16>      -> the applied ranges the restored snapshot held of the stream
//	fD<device>\x00<streamID:16>      -> the ranges of the stream backfilled so far (fL and fD are
//	                                    deleted once the backfill is finished)
//
// The applied ranges are written in the same transaction as the log entries
// that produced them, so the dedup state is never ahead of or behind the log;
// a retired stream's ranges key is deleted in the transaction of its
// retirement entry (KindRetire). In cluster mode a partition's position
// is written in the transaction of the entries read from it, so it is
// never ahead of what the log holds.
// Everything else the hub holds in memory (registry, consumer state) is a
// function of the log: a restart loads the newest usable checkpoint and
// replays the log entries after its position through the same apply path.
// Retention keeps the log after the older checkpoint, so a damaged newest
// one costs a longer replay, not data.
package hublog
