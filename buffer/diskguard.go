package buffer

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// DiskFullError is the error of an append the disk guard refused: the
// filesystem holding the store has less than the reserve free. It wraps
// ErrFull and ErrDiskFull.
type DiskFullError struct {
	Dir     string // the store's directory
	Free    int64  // bytes free on its filesystem at the check
	Reserve int64  // Options.DiskReserve
}

func (e *DiskFullError) Error() string {
	return fmt.Sprintf("buffer: the filesystem of %s is short of space: %s free, the store keeps %s in reserve "+
		"for its own writes; appends resume as acknowledged events free space", e.Dir, fmtBytes(e.Free), fmtBytes(e.Reserve))
}

// Is makes errors.Is match ErrFull and ErrDiskFull.
func (e *DiskFullError) Is(target error) bool { return target == ErrFull || target == ErrDiskFull }

// diskLevel is how short of space the filesystem is for one append.
type diskLevel uint8

const (
	diskOK       diskLevel = iota // above the reserve: nothing to do
	diskLow                       // below the reserve: the stream's full policy applies
	diskCritical                  // below 3/4 of the reserve: every append is refused
)

// diskRecheck is how often an append of a Block stream waiting for disk
// space looks again: space comes back with compactions, which signal nothing.
const diskRecheck = 250 * time.Millisecond

// appendOverhead is what Badger writes per append besides the blocks'
// bytes: keys, entry headers, the stream's metadata.
const appendOverhead = 512

// diskGuard keeps the store's filesystem from filling: Badger writes its
// logs and tables through memory maps, and a write into a map that the
// filesystem cannot back kills the process with SIGBUS. Appends are
// admitted only while the filesystem keeps reserve bytes free beyond them
// and the appends in flight, which leaves Badger room to flush memtables
// and compact; acknowledgements and drops are always admitted, since they
// are what frees space.
type diskGuard struct {
	dir     string
	free    func(string) (int64, error)
	reserve int64 // 0: no guard
	log     *slog.Logger

	inflight atomic.Int64 // bytes of admitted appends not yet committed
	lastFree atomic.Int64 // free bytes at the last check, -1 unknown
	limited  atomic.Bool  // the last check found less than the reserve
	refused  atomic.Uint64
	dropped  atomic.Uint64 // appends that dropped older blocks for space
	reclaims atomic.Uint64

	mu       sync.Mutex // serialises the limited transitions' log lines
	failLog  bool       // a failed statfs was logged
	lastHead map[*Stream]uint64
}

func newDiskGuard(dir string, o Options) *diskGuard {
	g := &diskGuard{dir: dir, free: o.FreeSpace, reserve: max(o.DiskReserve, 0), log: o.Logger, lastHead: map[*Stream]uint64{}}
	g.lastFree.Store(-1)
	return g
}

// on reports whether the guard checks anything.
func (g *diskGuard) on() bool { return g.reserve > 0 }

// check measures free space for an append of size bytes (0: none) and
// notes the transition into or out of the limited state.
func (g *diskGuard) check(size int64) (diskLevel, int64) {
	if !g.on() {
		return diskOK, -1
	}
	free, err := g.free(g.dir)
	if err != nil {
		g.mu.Lock()
		if !g.failLog {
			g.failLog = true
			g.log.Warn("buffer: cannot measure free disk space; appends are not held back before the filesystem fills", "dir", g.dir, "err", err)
		}
		g.mu.Unlock()
		return diskOK, -1
	}
	g.lastFree.Store(free)
	left := free - g.inflight.Load()
	if size > 0 {
		left -= size + appendOverhead
	}
	lvl := diskOK
	switch {
	case left < g.reserve-g.reserve/4:
		lvl = diskCritical
	case left < g.reserve:
		lvl = diskLow
	}
	g.note(lvl != diskOK, free)
	return lvl, free
}

// note logs once when the limit starts to apply and once when it lifts.
func (g *diskGuard) note(limited bool, free int64) {
	if g.limited.Load() == limited {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.limited.Swap(limited) == limited {
		return
	}
	if limited {
		g.log.Warn("buffer: disk space low: appends now get the full-buffer policy (reject, block or drop oldest) "+
			"until acknowledged events free space; below three quarters of it every append is refused",
			"dir", g.dir, "free_bytes", free, "reserve_bytes", g.reserve)
	} else {
		g.log.Info("buffer: disk space recovered; appends are taken again", "dir", g.dir, "free_bytes", free, "reserve_bytes", g.reserve)
	}
}

// admit applies the disk limit to an append of size bytes to st before it
// is queued. It returns whether the append must drop at least its own size
// of the stream's oldest blocks (DropOldest below the reserve: the stream
// stops growing), or the error that refuses it. A Block stream waits for
// space, rechecking every diskRecheck and on every acknowledgement. On
// success the size counts as in flight until the caller's release.
func (g *diskGuard) admit(ctx context.Context, st *Stream, size int64) (drop bool, err error) {
	if !g.on() {
		return false, nil
	}
	for {
		lvl, free := g.check(size)
		if lvl == diskOK {
			g.inflight.Add(size)
			return false, nil
		}
		if lvl == diskLow && st.opts.Full == DropOldest {
			st.mu.Lock()
			held := st.bytes
			st.mu.Unlock()
			if held >= size {
				g.dropped.Add(1)
				g.inflight.Add(size)
				return true, nil
			}
		}
		if st.opts.Full != Block {
			g.refused.Add(1)
			return false, &DiskFullError{Dir: g.dir, Free: free, Reserve: g.reserve}
		}
		st.mu.Lock()
		space := st.space
		st.mu.Unlock()
		t := time.NewTimer(diskRecheck)
		select {
		case <-space:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			g.refused.Add(1)
			return false, fmt.Errorf("buffer: waiting for disk space for stream %q: %w", st.name, ctx.Err())
		}
		t.Stop()
	}
}

// release ends an admitted append's time in flight.
func (g *diskGuard) release(size int64) {
	if g.on() {
		g.inflight.Add(-size)
	}
}

// DiskStatus is the disk guard's view of the store's filesystem.
type DiskStatus struct {
	// Enabled is false when the guard is off (DiskReserve negative, or no
	// way to measure free space on this platform).
	Enabled bool
	// FreeBytes is the space free on the filesystem (-1: unknown).
	FreeBytes int64
	// ReserveBytes is Options.DiskReserve.
	ReserveBytes int64
	// Limited is true while free space is below the reserve: appends get
	// the streams' full policy.
	Limited bool
	// RefusedAppends counts appends refused (or timed out waiting) for
	// space; DroppedAppends those that dropped older blocks to make room;
	// Reclaims the passes that compacted acknowledged blocks away early.
	RefusedAppends, DroppedAppends, Reclaims uint64
}

// DiskStatus measures free space now and reports the disk guard's state.
func (s *Store) DiskStatus() DiskStatus {
	g := s.disk
	if g.on() {
		g.check(0)
	}
	return DiskStatus{Enabled: g.on(), FreeBytes: g.lastFree.Load(), ReserveBytes: g.reserve, Limited: g.limited.Load(),
		RefusedAppends: g.refused.Load(), DroppedAppends: g.dropped.Load(), Reclaims: g.reclaims.Load()}
}

// openSpaceSlack is what opening a store writes besides the memtables it
// replays: a new memtable log and value-log file header, the manifest,
// and on tmpfs the pages of log holes that the replay reads.
const openSpaceSlack = 1 << 20

// checkOpenSpace refuses to open a store whose filesystem cannot take
// what opening writes: Badger replays each memtable log and flushes it to
// a table (about the log's size, one at a time) before it deletes the log,
// all through memory maps, so too little space is a SIGBUS, not an error.
func checkOpenSpace(dir string, free func(string) (int64, error)) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil // a new store, or one Badger will report on
	}
	var largest, total int64
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".mem") {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		n := allocatedBytes(fi)
		largest, total = max(largest, n), total+n
	}
	need := largest + largest/8 + openSpaceSlack
	avail, err := free(dir)
	if err != nil || avail >= need {
		return nil
	}
	return fmt.Errorf("%w: open buffer %s: %s free on its filesystem, opening needs about %s "+
		"(it turns %s of write-ahead log into tables); free space there and start again: "+
		"the buffered events are kept", ErrDiskFull, dir, fmtBytes(avail), fmtBytes(need), fmtBytes(total))
}

// spaceProbePath is the directory statfs is asked about: dir, or the
// nearest parent that exists when dir is yet to be created.
func spaceProbePath(dir string) string {
	p := filepath.Clean(dir)
	for {
		if _, err := os.Stat(p); err == nil {
			return p
		}
		parent := filepath.Dir(p)
		if parent == p {
			return p
		}
		p = parent
	}
}

// fmtBytes renders n as B, KiB or MiB for log lines and errors.
func fmtBytes(n int64) string {
	switch {
	case n >= 10<<20 || n <= -10<<20:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<20 || n <= -1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 10<<10 || n <= -10<<10:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

// DefaultDiskReserve is the reserve a profile's Badger settings need:
// room to flush one memtable into a level-0 table while its log still
// exists, and to compact the level-0 tables that trigger a compaction
// (written out in full before their inputs are deleted), plus slack for
// the manifest, a new memtable log and value-log file, and a reopen.
func DefaultDiskReserve(p Profile) int64 {
	bo := badgerOptions("", Options{Profile: p})
	table := bo.MemTableSize + bo.MemTableSize/8 // a table is a little larger than its memtable
	return openSpaceSlack + table*int64(1+bo.NumLevelZeroTables)
}
