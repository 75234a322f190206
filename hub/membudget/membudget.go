// Package membudget derives the sizes of what a hub holds in memory from
// one budget, so that Badger's memtables and caches, the intake queues, the
// apply-lag bound, the engine's caps and the Go runtime's memory limit are
// sized together instead of each default being chosen on its own. Derive
// is a pure function of the budget; hubd applies its result to every
// component whose own key is not set, and shows it at start and on
// /metrics.
package membudget

import (
	"fmt"
	"strings"
	"time"

	"edgeflow/internal/bytesize"
)

// The named budgets: ProfileServer is hubd's default (a server or VM with
// a gigabyte or more to spare), ProfileSmall a gateway's.
const (
	ProfileServer = "server"
	ProfileSmall  = "small"
)

// ServerLimit and SmallLimit are the budgets of ProfileServer and
// ProfileSmall. At ServerLimit Derive gives Badger's and the hub's
// long-standing defaults where they were sized for a server (64 MiB
// memtables, a 16 MiB apply lag, queues of 64), so a hub that sets
// nothing behaves as before.
const (
	ServerLimit int64 = 1 << 30
	SmallLimit  int64 = 128 << 20
)

// MinLimit is the smallest budget Derive accepts: below it the fixed costs
// (the binary's pages, Badger's tables and the runtime) alone exceed it.
const MinLimit int64 = 64 << 20

// MaxLimit bounds a budget (1 TiB), so that a mistyped figure is an error
// rather than a hub sized for memory it does not have.
const MaxLimit int64 = 1 << 40

// Sizes are the derived sizes, in bytes unless a field says otherwise. A
// zero field leaves the component's own default.
type Sizes struct {
	// Limit is the budget they were derived from.
	Limit int64
	// GoMemoryLimit is the Go runtime's soft memory limit
	// (debug.SetMemoryLimit): the budget less what Go does not count (the
	// binary's pages and Badger's memory-mapped files). 0: no limit.
	GoMemoryLimit int64
	// GCPercent is the garbage collector's target (GOGC) below
	// ServerLimit: 100, so that the heap grows to about twice its live
	// data between collections rather than three times at hubd's own
	// 200 (chosen for ack latency at 10,000 devices). 0: hubd's.
	GCPercent int
	// BadgerMemTable is Badger's memtable size; the hub's Go heap holds
	// BadgerMemTables of them at most (one written, the others waiting
	// to be flushed), each allocated whole when it starts.
	BadgerMemTable int64
	// BadgerMemTables is Badger's NumMemtables (a count).
	BadgerMemTables int
	// BadgerBlockCache is Badger's block cache (decompressed blocks read
	// back: queries of /v1/events, rebuilds, checkpoints).
	BadgerBlockCache int64
	// BadgerIndexCache bounds the table indexes Badger keeps in memory;
	// 0 keeps all of them, Badger's default.
	BadgerIndexCache int64
	// BadgerValueLogFile is the size of one value-log file. Written
	// through a memory map, the current file's pages count in the
	// process's resident memory (file-backed) until the kernel reclaims
	// them.
	BadgerValueLogFile int64
	// ApplyLag bounds the payload committed and not yet applied.
	ApplyLag int64
	// MaxGroupBytes bounds the payload of one group commit.
	MaxGroupBytes int
	// MaxGroupBatches bounds the batches of one group commit (a count).
	// The applier's decoded views (a batch decoded is about ten times its
	// payload) are recycled through a pool, which keeps as many as were
	// in flight at once: the group and the apply lag bound them.
	MaxGroupBatches int
	// QueueLen is each decode worker's and the committer's queue, in
	// messages (a count).
	QueueLen int
	// ClientQueue is the embedded broker's queue per client, in messages.
	ClientQueue int
	// MaxLivePartials caps the engine's partials in memory (a count).
	// Derive leaves it 0, the engine's default (see Derive).
	MaxLivePartials int
	// QueryCachePartials bounds the engine's query cache (a count).
	QueryCachePartials int
	// MaxPending caps the events waiting for the watermark (a count).
	MaxPending int
	// StreamBuffer is the merged stream's ring, in events.
	StreamBuffer int
	// EvictAfter is how long (event time) a final partial stays live in
	// memory before the engine moves it to its store. Derive leaves it 0,
	// the engine's default: scaled with the budget (8m at 128 MiB) it did
	// not lower a catch-up's peak, and the evicted partials' writes went
	// through Badger's memtables instead (docs/MEMORY.md).
	EvictAfter time.Duration
}

// Per-item costs used to turn bytes into counts, measured with heap
// profiles (docs/MEMORY.md).
const (
	partialBytes   = 512  // a live partial with a few distinct values
	cachedBytes    = 4096 // a decoded stored partial with its sketch
	pendingBytes   = 100  // an event waiting for the watermark, with its share of the merge
	ringEventBytes = 40   // an event in the merged stream's ring
)

// ParseLimit reads a memory-limit or profile value: a byte count
// (256MiB, 1GiB) or a profile name (server, small).
func ParseLimit(s string) (int64, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case ProfileServer:
		return ServerLimit, nil
	case ProfileSmall:
		return SmallLimit, nil
	}
	n, err := bytesize.Parse(s)
	if err != nil {
		return 0, err
	}
	if n < MinLimit || n > MaxLimit {
		return 0, fmt.Errorf("%s is outside %s..%s", s, human(MinLimit), human(MaxLimit))
	}
	return n, nil
}

// Derive sizes every component from a budget of limit bytes (at least
// MinLimit). The shares: a sixteenth of the budget per memtable (at most
// 64 MiB), five memtables from a gigabyte up and fewer below; a quarter
// for the block cache (at most 256 MiB, Badger's default), which only
// reads fill; a sixty-fourth for the apply lag (below ServerLimit times the
// budget's share of it again) and a thirty-second per group commit, with
// 512 batches in a group scaled by that share; below ServerLimit a sixteenth each for the query cache and the
// watermark's pending events (from ServerLimit up the engine's own caps). The Go memory limit is seven eighths of the
// budget, the rest left to what Go does not count.
func Derive(limit int64) (Sizes, error) {
	if limit < MinLimit || limit > MaxLimit {
		return Sizes{}, fmt.Errorf("memory budget %s is outside %s..%s", human(limit), human(MinLimit), human(MaxLimit))
	}
	s := Sizes{Limit: limit, GoMemoryLimit: limit - limit/8}
	if limit < ServerLimit {
		s.GCPercent = 100
	}
	s.BadgerMemTable = clamp(limit/16, 4<<20, 64<<20)
	switch {
	case limit >= 1<<30:
		s.BadgerMemTables = 5
	case limit >= 256<<20:
		s.BadgerMemTables = 3
	default:
		s.BadgerMemTables = 2
	}
	s.BadgerBlockCache = clamp(limit/4, 1<<20, 256<<20)
	if limit < 1<<30 {
		s.BadgerIndexCache = limit / 32
	}
	s.BadgerValueLogFile = clamp(limit/4, 16<<20, 1<<30-1)
	if limit >= ServerLimit {
		s.BadgerValueLogFile = 1<<30 - 1 // Badger's default
	}
	// The apply lag counts payload, and what it holds is decoded (about
	// ten times as large): below ServerLimit it shrinks with the square
	// of the budget's share (1 MiB at 256 MiB).
	s.ApplyLag = clamp(limit/64, 1<<20, 64<<20)
	if limit < ServerLimit {
		s.ApplyLag = max(int64(float64(16<<20)*float64(limit)/float64(ServerLimit)*float64(limit)/float64(ServerLimit)), 256<<10)
	}
	s.MaxGroupBatches = int(clamp(512*limit/ServerLimit, 32, 512))
	s.MaxGroupBytes = int(clamp(limit/32, 2<<20, 32<<20))
	s.QueueLen = int(clamp(limit/(16<<20), 8, 64))
	s.ClientQueue = int(clamp(limit/(1<<20), 256, 1024))
	// The engine's live-partial cap is left at its own default: when
	// partials of windows that are not final fill it, events wait in the
	// quarantine and, once that is full, are dropped from the aggregates
	// (the log keeps them). Derived from a 256 MiB budget (65,536
	// partials) it did so within seconds of a 1,000-device catch-up.
	if limit < ServerLimit {
		s.QueryCachePartials = int(clamp(limit/16/cachedBytes, 1024, 20_000))
		s.MaxPending = int(clamp(limit/16/pendingBytes, 65_536, 1<<20))
	}
	s.StreamBuffer = int(clamp(limit/1024/ringEventBytes*16, 4096, 1<<16))
	return s, nil
}

// Component is one derived size as /metrics and the start log show it.
type Component struct {
	Name  string
	Bytes int64
}

// Components lists the sizes in bytes, counts converted with the costs
// Derive assumed, in a fixed order; zero sizes are left out.
func (s Sizes) Components() []Component {
	all := []Component{
		{"go_memory_limit", s.GoMemoryLimit},
		{"badger_memtables", s.BadgerMemTable * int64(s.BadgerMemTables)},
		{"badger_block_cache", s.BadgerBlockCache},
		{"badger_index_cache", s.BadgerIndexCache},
		{"badger_value_log_file", s.BadgerValueLogFile},
		{"apply_lag", s.ApplyLag},
		{"group_commit", int64(s.MaxGroupBytes)},
		{"live_partials", int64(s.MaxLivePartials) * partialBytes},
		{"query_cache", int64(s.QueryCachePartials) * cachedBytes},
		{"pending_events", int64(s.MaxPending) * pendingBytes},
		{"merged_stream_ring", int64(s.StreamBuffer) * ringEventBytes},
	}
	out := all[:0]
	for _, c := range all {
		if c.Bytes > 0 {
			out = append(out, c)
		}
	}
	return out
}

// LogAttrs are the sizes as slog key-value pairs for the start line, in
// readable units.
func (s Sizes) LogAttrs() []any {
	a := []any{"memory_limit", human(s.Limit)}

	if s.GoMemoryLimit > 0 {
		a = append(a, "go_memory_limit", human(s.GoMemoryLimit))
	}
	if s.GCPercent > 0 {
		a = append(a, "gc_percent", s.GCPercent)
	}
	return append(a,
		"badger_memtable", human(s.BadgerMemTable), "badger_memtables", s.BadgerMemTables,
		"badger_block_cache", human(s.BadgerBlockCache), "badger_index_cache", human(s.BadgerIndexCache),
		"badger_value_log_file", human(s.BadgerValueLogFile), "apply_lag", human(s.ApplyLag),
		"max_group_bytes", human(int64(s.MaxGroupBytes)), "max_group_batches", s.MaxGroupBatches, "queue_len", s.QueueLen, "mqtt_client_queue", s.ClientQueue,
		"max_live_partials", count(s.MaxLivePartials), "query_cache_partials", count(s.QueryCachePartials),
		"max_pending", count(s.MaxPending), "stream_buffer", count(s.StreamBuffer), "evict_after", evict(s.EvictAfter))
}

// evict shows EvictAfter, or "default" for zero (the engine's own).
func evict(d time.Duration) any {
	if d == 0 {
		return "default"
	}
	return d.String()
}

// count shows a count, or "default" for zero (the component's own).
func count(n int) any {
	if n == 0 {
		return "default"
	}
	return n
}

// clamp bounds v to lo..hi.
func clamp(v, lo, hi int64) int64 { return min(max(v, lo), hi) }

// human writes a byte count in the largest binary unit that divides it,
// as bytesize.Parse reads it back.
func human(n int64) string {
	for _, u := range []struct {
		s string
		m int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n != 0 && n%u.m == 0 {
			return fmt.Sprintf("%d%s", n/u.m, u.s)
		}
	}
	return fmt.Sprintf("%dB", n)
}
