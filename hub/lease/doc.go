// Package lease gives each partition of the cluster log exactly one owning
// hub at a time, through leases in a JetStream KV bucket.
//
// A hub announces itself with a heartbeat key (hub.{id}, carrying the
// base URL of its HTTP API, Options.URL, for its peers) and holds a
// partition with a lease key (lease.{p}): KV Create acquires it, Update
// with the last revision renews it, and the bucket's MaxAge (the lease
// TTL) removes a key nobody renews, so a dead hub's leases are taken
// over. The revision of the Create that acquired a lease is the
// partition's epoch: it only grows, and natslog.PartitionCheckpoints
// refuses the writes of any older epoch (fencing).
//
// The target assignment is rendezvous hashing with a bounded load
// (Assign) over the live hubs: a hub releases (after Handoff) what moved
// away from it, takes free partitions assigned to it, and after a grace
// period any partition left free.
//
// Safety: a hub believes it owns a partition only until TTL/2 after the
// send time of its last successful renewal, measured on its own clock,
// while the server keeps the key at least TTL after it stored it; a
// failed renewal, a changed lease or a clock that moved backwards ends
// the ownership at once (Lost). A stale owner that acts anyway (paused
// between checking and writing) is refused by the checkpoint fencing.
package lease
