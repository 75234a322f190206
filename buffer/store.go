package buffer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
	"github.com/prometheus/client_golang/prometheus"
)

// Store is one Badger directory holding many streams.
type Store struct {
	dir  string
	opts Options
	db   *badger.DB
	disk *diskGuard

	ops     chan *op
	scratch []byte // the committer's, for encoding blocks
	tail    tailCache
	syncs   prometheus.Histogram // duration of the committer's syncs
	stop    chan struct{}
	wg      sync.WaitGroup
	closeMu sync.RWMutex
	closed  bool

	mu      sync.Mutex
	streams map[string]*Stream
	nextNum uint32
}

// Open opens or creates the store in dir. A damaged directory gives an error
// wrapping ErrCorrupt that names the path and what to do; it never panics.
func Open(dir string, o Options) (s *Store, err error) {
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.DiskReserve > 0 {
		if err := checkOpenSpace(dir, o.FreeSpace); err != nil {
			return nil, err
		}
	}
	// Badger replays its logs through memory maps on this goroutine: a
	// fault there (a filesystem that cannot back a page, a file cut short
	// under the map) becomes a panic that the recover below reports,
	// rather than a crash.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			s, err = nil, openPanicError(dir, o, r)
		}
	}()
	db, err := badger.Open(badgerOptions(dir, o))
	if err != nil {
		msg := err.Error()
		if strings.Contains(msg, "Cannot acquire directory lock") || strings.Contains(msg, "resource temporarily unavailable") {
			return nil, fmt.Errorf("%w: %s: %v", ErrLocked, dir, err)
		}
		return nil, corruptDirError(dir, err)
	}
	s = &Store{
		dir: dir, opts: o, db: db, disk: newDiskGuard(dir, o),
		ops:     make(chan *op, maxGroup),
		stop:    make(chan struct{}),
		streams: make(map[string]*Stream),
		syncs: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "edgeflow_buffer_sync_seconds",
			Help:    "Duration of the store's syncs; appends wait for the next one to become durable (and, in interval mode, readable).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
	}
	s.tail.budget = o.TailCacheBytes
	if err := s.loadNextNum(); err != nil {
		db.Close()
		return nil, corruptDirError(dir, err)
	}
	if o.Registerer != nil {
		if err := o.Registerer.Register(newCollector(s)); err != nil {
			db.Close()
			return nil, fmt.Errorf("buffer: register metrics: %w", err)
		}
	}
	s.wg.Add(2)
	go s.commitLoop()
	// Maintenance drops expired blocks, removes garbage and runs
	// value-log GC.
	go s.every(o.MaintenanceInterval, func() { s.Maintain() })
	if o.PageOutInterval > 0 {
		if p := newPager(dir, pageOutSlack); p != nil {
			s.wg.Add(1)
			// Keeps Badger's mapped files out of the resident set; see
			// Options.PageOutInterval.
			go s.every(o.PageOutInterval, p.maybePageOut)
		} else {
			o.Logger.Info("buffer: cannot page out mapped files (Linux 5.4 or later needed); resident memory grows with the store", "dir", dir)
		}
	}
	if lvl, free := s.disk.check(0); lvl != diskOK {
		o.Logger.Warn("buffer: opened with the disk short of space: events are taken again once uploads free it",
			"dir", dir, "free_bytes", free, "reserve_bytes", s.disk.reserve)
	}
	return s, nil
}

// openPanicError reports a panic out of badger.Open: a memory fault while
// replaying (out of space, or a file truncated under its map) names the
// free space, anything else is a damaged directory.
func openPanicError(dir string, o Options, r any) error {
	if re, ok := r.(runtime.Error); ok && strings.Contains(re.Error(), "fault") {
		free := "unknown"
		if n, err := o.FreeSpace(spaceProbePath(dir)); err == nil {
			free = fmtBytes(n)
		}
		return fmt.Errorf("%w: open buffer %s: reading its logs faulted (%v) with %s free on its filesystem: "+
			"if that is little, free space there and start again (the buffered events are kept); "+
			"otherwise a file was cut short and the directory is damaged: move it aside (mv %s %s.broken)",
			ErrDiskFull, dir, re, free, dir, dir)
	}
	return corruptDirError(dir, fmt.Errorf("badger panicked: %v", r))
}

func corruptDirError(dir string, cause error) error {
	return fmt.Errorf("%w: open buffer %s: %v; the directory is damaged: move it aside "+
		"(mv %s %s.broken) and restart to begin a new buffer (its unsent events are lost), "+
		"or restore it from a backup", ErrCorrupt, dir, cause, dir, dir)
}

// badgerOptions maps a profile to Badger settings. Both keep ValueLogFileSize
// small: Badger mmaps value-log files at twice their size, which a 32-bit
// address space cannot afford at the 1 GiB default (badger #2287). Compression
// stays off so a zero block cache is safe.
func badgerOptions(dir string, o Options) badger.Options {
	bo := badger.DefaultOptions(dir).
		WithLogger(badgerLogger{o.Logger}).
		WithSyncWrites(false).
		WithCompression(options.None).
		WithNumVersionsToKeep(1).
		WithMetricsEnabled(false).
		WithDetectConflicts(false)
	switch o.Profile {
	case ProfileLowMemory:
		bo = bo.WithMemTableSize(4 << 20).
			WithNumMemtables(2).
			WithBaseTableSize(1 << 20).
			WithBaseLevelSize(4 << 20).
			WithNumLevelZeroTables(2).
			WithNumLevelZeroTablesStall(6).
			WithNumCompactors(2).
			WithBlockCacheSize(0).
			WithIndexCacheSize(0).
			WithValueThreshold(576 << 10).
			WithValueLogFileSize(16 << 20).
			WithNumGoroutines(2)
	default:
		bo = bo.WithMemTableSize(32 << 20).
			WithNumMemtables(3).
			WithBaseTableSize(4 << 20).
			WithBaseLevelSize(16 << 20).
			WithNumLevelZeroTables(4).
			WithNumLevelZeroTablesStall(10).
			WithNumCompactors(2).
			WithBlockCacheSize(8 << 20).
			WithIndexCacheSize(4 << 20).
			WithValueThreshold(1 << 20).
			WithValueLogFileSize(64 << 20).
			WithNumGoroutines(4)
	}
	if o.ValueLogFileSize > 0 {
		bo = bo.WithValueLogFileSize(o.ValueLogFileSize)
	}
	return bo
}

// loadNextNum finds the largest stream number in use.
func (s *Store) loadNextNum() error {
	return s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixName}})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			err := it.Item().Value(func(v []byte) error {
				if len(v) != 4 {
					return fmt.Errorf("stream number of %q is %d bytes", it.Item().Key()[1:], len(v))
				}
				if n := binary.BigEndian.Uint32(v); n >= s.nextNum {
					s.nextNum = n + 1
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// Dir returns the directory the store lives in.
func (s *Store) Dir() string { return s.dir }

// Names lists every stream in the store, loaded or not.
func (s *Store) Names() ([]string, error) {
	var names []string
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixName}})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			names = append(names, string(it.Item().Key()[1:]))
		}
		return nil
	})
	return names, err
}

// Stream opens the named stream, creating it (with a new random stream id)
// if it does not exist. The same name returns the same *Stream; opts apply
// from the first call.
func (s *Store) Stream(name string, opts StreamOptions) (*Stream, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if name == "" || len(name) > 256 {
		return nil, fmt.Errorf("buffer: stream name must be 1..256 bytes, got %d", len(name))
	}
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.closeMu.RUnlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.streams[name]; ok {
		return st, nil
	}
	st, err := s.loadStream(name, opts)
	if err != nil {
		return nil, err
	}
	s.streams[name] = st
	return st, nil
}

// enter holds the store open for an operation; callers RUnlock closeMu.
func (s *Store) enter() error {
	s.closeMu.RLock()
	if s.closed {
		s.closeMu.RUnlock()
		return ErrClosed
	}
	return nil
}

// Close stops the committer (finishing queued appends), syncs and closes Badger.
func (s *Store) Close() error {
	s.closeMu.Lock()
	if s.closed {
		s.closeMu.Unlock()
		return nil
	}
	s.closed = true
	close(s.stop)
	s.closeMu.Unlock()
	s.wg.Wait()
	serr := s.db.Sync()
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("buffer: close %s: %w", s.dir, err)
	}
	if serr != nil {
		return fmt.Errorf("buffer: sync %s: %w", s.dir, serr)
	}
	return nil
}

// every runs fn every d until the store closes; Open starts it on s.wg.
func (s *Store) every(d time.Duration, fn func()) {
	defer s.wg.Done()
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			fn()
		}
	}
}

// Maintain runs one maintenance pass now: max-age drops on every loaded
// stream and value-log GC until nothing is left to rewrite. It runs on its
// own every MaintenanceInterval.
func (s *Store) Maintain() {
	if s.enter() != nil {
		return
	}
	defer s.closeMu.RUnlock()
	s.mu.Lock()
	streams := make([]*Stream, 0, len(s.streams))
	for _, st := range s.streams {
		streams = append(streams, st)
	}
	s.mu.Unlock()
	for _, st := range streams {
		if st.opts.MaxAge > 0 {
			cutoff := s.opts.Now().Add(-st.opts.MaxAge).UnixMilli()
			if err := s.submit(&op{kind: opExpire, st: st, cutoffMs: cutoff}); err != nil {
				s.opts.Logger.Warn("buffer: max-age pass failed", "stream", st.name, "err", err)
			}
		}
	}
	if s.disk.on() {
		if lvl, _ := s.disk.check(0); lvl != diskOK {
			if cand := s.disk.reclaimCandidates(streams); len(cand) > 0 {
				if err := s.submit(&op{kind: opReclaim, streams: cand}); err != nil {
					s.opts.Logger.Warn("buffer: reclaim pass failed", "err", err)
				}
			}
		}
	}
	for i := 0; i < 16; i++ {
		if err := s.db.RunValueLogGC(0.5); err != nil {
			if !errors.Is(err, badger.ErrNoRewrite) && !errors.Is(err, badger.ErrRejected) {
				s.opts.Logger.Warn("buffer: value-log GC", "dir", s.dir, "err", err)
			}
			break
		}
	}
}

// pageOutSlack is the growth of file-backed resident memory that makes
// page-out loop run a pass: small next to the low-memory target, and enough
// that an idle agent does not walk its mappings every tick.
const pageOutSlack = 1 << 20

// badgerLogger forwards Badger's warnings and errors to slog and drops its
// chatty info and debug lines.
type badgerLogger struct{ l *slog.Logger }

func (b badgerLogger) Errorf(f string, a ...any) {
	b.l.Error("badger: " + strings.TrimSpace(fmt.Sprintf(f, a...)))
}
func (b badgerLogger) Warningf(f string, a ...any) {
	b.l.Warn("badger: " + strings.TrimSpace(fmt.Sprintf(f, a...)))
}
func (badgerLogger) Infof(string, ...any)  {}
func (badgerLogger) Debugf(string, ...any) {}
