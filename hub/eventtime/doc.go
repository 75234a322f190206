// Package eventtime holds an event's corrected time (Correct) and the
// event-time index of the hub's log: the keys that let GET /v1/events
// find a device's batch entries by the corrected times of their events,
// whatever their arrival. A device back from a day offline uploads events
// of yesterday today, and a query for yesterday finds them. Every batch
// entry gets at most four keys
//
//	t<device>\x00<level:1><bucketStart:8><position:8><serverTimeNs:8>
//
// written in the same transaction as the entry itself, so the two are
// never apart after a crash. position and serverTimeNs are the entry's
// log key. The level is the smallest of minute, hour and day whose
// buckets holding the entry's events number at most four (a key per
// bucket, no value). An entry whose events spread over more than four
// days (a device offline for weeks that reports once an hour, say) gets
// one key at the catch-all level instead: bucketStart is its earliest
// event time and the value its latest (8 bytes). A query for [from, to)
// reads, for each level, the keys of the buckets that overlap it, and the
// catch-all keys that start before to (keys only, cheap), keeping those
// whose span overlaps it; then it reads the entries they name, in log
// order (Entries).
//
// The buckets are those of the events the entry applies (fresh, not
// refused) at the time Correct gives them, the time the query filters
// by. A decode worker computes them for the whole batch
// (Buckets.Prepare); the committer recomputes them only when the entry
// applies part of it or an UNTRUSTED event takes the hub's estimate
// (AppendKVs). Retention (KeysOfLog) and the one-time build (EnsureIndex)
// compute them from the stored entry, the same way.
//
// The keys and their codecs are hublog's (keys.go): hublog.KeyEventIndex
// marks a store whose index covers the whole log. A store without it
// (written before the index existed) gets its index built once from its
// log when the hub opens it; the per-device arrival index that came
// before (keys e<device>\x00<serverTimeNs:8><position:8> and its marker
// s) is deleted then. The package works on a *hublog.Store and never
// imports the hub itself.
package eventtime
