// Package buffer is the agent's durable event log: a FIFO of opaque records
// (encoded events) per stream, on Badger, that keeps events safe while the
// link is down and deletes nothing until the hub has acknowledged it.
//
// Many streams share one Store (one Badger directory). A Stream assigns
// consecutive sequence numbers on Append, serves ReadFrom, frees space on
// Ack, and enforces its bounds (bytes, age) with a FullPolicy. Every event
// it drops is counted and reported as a Gap until an Ack covers it.
//
// # Layout
//
// Records are grouped in blocks: every commit writes the records it has for
// a stream as one Badger value, keyed by the stream's number and the block's
// last sequence number, so a forward Seek to a sequence lands on the block
// that holds it, and deleting acknowledged data costs one tombstone per
// block rather than one per event (Badger's queue tombstone trap, issues
// #1158 and #1995). Stream metadata (stream id, acknowledged position, head,
// pending gaps) lives in one key per stream and is the truth: blocks below
// the head are garbage, removed lazily.
//
//	n<name>                          -> stream number (4 bytes)
//	m<num:4>                         -> stream metadata
//	b<num:4><lastSeq:8><appendMs:8><plainLen:4> -> block of records
//
// A block's value is versioned: plain, s2-compressed when that saves at
// least an eighth, or a column chunk of events (the wire's columnar batch
// form without its header) when that does (Options.BlockCompression).
// Every reader takes all three; an unknown version is ErrCorrupt, dropped
// as a gap like any damaged block. plainLen in the key is the block's plain
// length (for a plain block, its value length), so byte bounds count
// events, not how well they compress. ScanColumns hands column blocks out
// as stored, for an uplink to frame as batches.
//
// # Memory
//
// Badger maps its tables and logs into memory, so whatever it writes or
// reads stays in the process's resident set until the kernel needs the
// memory. With Options.PageOutInterval (on in ProfileLowMemory) the store
// hands those pages back with madvise(MADV_PAGEOUT) as soon as they add up
// to a MiB, which bounds the resident set independently of the backlog.
//
// Each stream also keeps its newest blocks in memory, as written, within
// Options.TailCacheBytes for the whole store (the tail cache, tailcache.go).
// A read that starts in them, as the uplink's does right after an append,
// is answered without a Badger transaction and seek; any other read goes to
// Badger. Both give the same records, and blocks leave the cache with the
// stream's head (Ack, drops, expiry) or, for a block dropped as corrupt,
// the whole stream's cache goes.
//
// # Durability
//
// One committer goroutine writes all appends; concurrent appends share a
// write and, in DurabilitySync, one fsync. What a power loss can take:
//
//   - DurabilitySync: nothing that Append reported as done.
//   - DurabilityInterval: at most SyncInterval of appends (a process crash
//     alone loses nothing: data is in the OS page cache); Append with
//     WaitDurable waits for the next sync and then loses nothing.
//   - DurabilityNone: whatever the OS had not written back, typically up to
//     30 s; a process crash alone loses nothing.
//
// ReadFrom and Scan return records only once they are durable per the mode
// (in DurabilityInterval, after the next sync), so the uplink never sends
// the hub records that a power loss could take back: their sequence numbers
// would be reused for new events, which the hub would then discard as
// duplicates. In DurabilityNone that protection is the OS's write-back.
package buffer
