package buffer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// fakeClock is a wall clock tests move by hand; both stores of a pair share
// it so their blocks get the same append times (and keys).
type fakeClock struct{ ms atomic.Int64 }

func (c *fakeClock) now() time.Time { return time.UnixMilli(c.ms.Load()) }

// tailPair runs the same operations on two stores, one with the tail cache
// (index 0) and one without (index 1), and compares what readers see.
type tailPair struct {
	t     *testing.T
	dirs  [2]string
	opts  [2]Options
	s     [2]*Store
	st    [2][]*Stream
	names []string
	sopts []StreamOptions
}

func (p *tailPair) open() {
	p.t.Helper()
	for i := range p.s {
		p.s[i] = openTest(p.t, p.dirs[i], p.opts[i])
		p.st[i] = p.st[i][:0]
		for k, name := range p.names {
			st, err := p.s[i].Stream(name, p.sopts[k])
			if err != nil {
				p.t.Fatal(err)
			}
			p.st[i] = append(p.st[i], st)
		}
	}
}

func (p *tailPair) close() {
	p.t.Helper()
	for _, s := range p.s {
		if err := s.Close(); err != nil {
			p.t.Fatal(err)
		}
	}
}

// scanned is what one Scan gave.
type scanned struct {
	N    int
	Recs []Record
	Err  string
}

func scanAll(st *Stream, seq uint64, maxEvents, maxBytes int, stopAfter int) scanned {
	var out scanned
	n, err := st.Scan(seq, maxEvents, maxBytes, func(seq uint64, rec []byte) bool {
		if len(out.Recs) == stopAfter {
			return false
		}
		out.Recs = append(out.Recs, Record{seq, bytes.Clone(rec)})
		return true
	})
	out.N = n
	if err != nil {
		out.Err = err.Error()
	}
	return out
}

// errText is err's message without the store's directory, which differs
// between the pair.
func (p *tailPair) errText(i int, err error) string {
	if err == nil {
		return ""
	}
	return strings.ReplaceAll(err.Error(), p.dirs[i], "")
}

// TestTailCacheDifferential runs random appends (of 1..20 records of random
// sizes, often several blocks), scans and reads from random positions with
// random bounds and early stops, acks, drop-oldest and max-age drops,
// corrupt blocks and reopens against a store with the tail cache and one
// without, and requires every read, position and gap to be the same. It
// also checks the cache's invariants after every step (see checkTail).
func TestTailCacheDifferential(t *testing.T) {
	var hits, misses, cachedCorrupt uint64
	for seed := uint64(1); seed <= 6; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			h, m, c := runTailDifferential(t, seed)
			hits, misses, cachedCorrupt = hits+h, misses+m, cachedCorrupt+c
		})
	}
	t.Logf("cached store: %d reads from the cache, %d from Badger; %d corrupt blocks were cached", hits, misses, cachedCorrupt)
	if !t.Failed() && (hits == 0 || misses == 0 || cachedCorrupt == 0) {
		t.Fatalf("the operations did not exercise the cache: %d hits, %d misses, %d cached corrupt blocks", hits, misses, cachedCorrupt)
	}
}

func runTailDifferential(t *testing.T, seed uint64) (hits, misses, cachedCorrupt uint64) {
	rng := rand.New(rand.NewPCG(seed, seed*104729))
	clock := &fakeClock{}
	clock.ms.Store(1_800_000_000_000)
	base := Options{Now: clock.now, MaintenanceInterval: time.Hour, MaxBlockBytes: 2 << 10}
	switch seed % 3 {
	case 0:
		base.Durability = DurabilityNone
	case 1:
		base.Durability = DurabilitySync
	case 2:
		// Appends wait for the sync, so both stores see the same readable
		// positions; TestTailCacheHidesUnsynced covers what is not synced.
		base.Durability, base.SyncInterval = DurabilityInterval, 2*time.Millisecond
	}
	if seed%2 == 0 {
		base.BlockCompression = CompressNone
	}
	cached, plain := base, base
	cached.TailCacheBytes = []int64{2 << 10, 8 << 10, 1 << 20}[seed%3] // small budgets force evictions
	plain.TailCacheBytes = -1
	p := &tailPair{
		t: t, dirs: [2]string{t.TempDir(), t.TempDir()}, opts: [2]Options{cached, plain},
		names: []string{"drop", "age", "reject"},
		sopts: []StreamOptions{
			{MaxBytes: 16 << 10},
			{MaxBytes: 1 << 20, MaxAge: time.Minute},
			{MaxBytes: 24 << 10, Full: Reject},
		},
	}
	p.open()
	ctx := context.Background()
	var ao []AppendOptions
	if base.Durability == DurabilityInterval {
		ao = append(ao, AppendOptions{WaitDurable: true})
	}
	for step := 0; step < 300; step++ {
		clock.ms.Add(int64(rng.IntN(2000)))
		k := rng.IntN(len(p.names))
		sts := [2]*Stream{p.st[0][k], p.st[1][k]}
		stats := sts[1].Stats()
		what := ""
		switch op := rng.IntN(100); {
		case op < 40:
			batch := make([][]byte, 1+rng.IntN(20))
			for i := range batch {
				size := rng.IntN(80)
				if rng.IntN(8) == 0 {
					size = rng.IntN(1500)
				}
				batch[i] = fmt.Appendf(nil, "%d/%d/%d/%x", seed, step, i, make([]byte, size))
			}
			var res [2]string
			for i, st := range sts {
				r, err := st.Append(ctx, batch, ao...)
				res[i] = fmt.Sprint(r, p.errText(i, err))
			}
			what = fmt.Sprintf("append %d to %s", len(batch), p.names[k])
			if res[0] != res[1] {
				t.Fatalf("step %d %s: cached %s, plain %s", step, what, res[0], res[1])
			}
		case op < 75:
			from := stats.Head + uint64(rng.IntN(int(stats.Depth)+4))
			from -= min(from, uint64(rng.IntN(3)))
			maxEvents, maxBytes := rng.IntN(60), 1+rng.IntN(6000)
			stop := -1
			if rng.IntN(4) == 0 {
				stop = rng.IntN(10)
			}
			what = fmt.Sprintf("scan %s from %d (%d events, %d bytes, stop after %d)", p.names[k], from, maxEvents, maxBytes, stop)
			a, b := scanAll(sts[0], from, maxEvents, maxBytes, stop), scanAll(sts[1], from, maxEvents, maxBytes, stop)
			a.Err, b.Err = strings.ReplaceAll(a.Err, p.dirs[0], ""), strings.ReplaceAll(b.Err, p.dirs[1], "")
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("step %d %s:\ncached %d records %v %q\nplain  %d records %v %q", step, what, a.N, seqs(a.Recs), a.Err, b.N, seqs(b.Recs), b.Err)
			}
		case op < 82:
			from := stats.Head + uint64(rng.IntN(int(stats.Depth)+2))
			maxEvents, maxBytes := rng.IntN(80), 1+rng.IntN(8000)
			what = fmt.Sprintf("read %s from %d (%d events, %d bytes)", p.names[k], from, maxEvents, maxBytes)
			a, errA := sts[0].ReadFrom(from, maxEvents, maxBytes)
			b, errB := sts[1].ReadFrom(from, maxEvents, maxBytes)
			if !reflect.DeepEqual(a, b) || (errA == nil) != (errB == nil) {
				t.Fatalf("step %d %s: cached %v %v, plain %v %v", step, what, seqs(a), errA, seqs(b), errB)
			}
		case op < 92:
			upTo := stats.Acked + uint64(rng.IntN(int(stats.Next-stats.Acked)+1))
			what = fmt.Sprintf("ack %s through %d", p.names[k], upTo)
			errA, errB := sts[0].Ack(upTo), sts[1].Ack(upTo)
			if p.errText(0, errA) != p.errText(1, errB) {
				t.Fatalf("step %d %s: cached %v, plain %v", step, what, errA, errB)
			}
		case op < 95:
			clock.ms.Add(int64(rng.IntN(90_000)))
			what = "maintain"
			p.s[0].Maintain()
			p.s[1].Maintain()
		case op < 98:
			what = fmt.Sprintf("corrupt a block of %s", p.names[k])
			if c, ok := p.corrupt(k, rng); ok {
				what += fmt.Sprintf(" (ending at %d, cached %v)", c.last, c.cached)
				if c.cached {
					cachedCorrupt++
				}
			}
		default:
			what = "reopen"
			tc := p.s[0].TailCacheStats()
			hits, misses = hits+tc.Hits, misses+tc.Misses
			p.close()
			p.open()
		}
		p.compare(step, what)
	}
	tc := p.s[0].TailCacheStats()
	return hits + tc.Hits, misses + tc.Misses, cachedCorrupt
}

// compare requires the same positions and gaps from both stores, and
// checks the cached store's tail invariants.
func (p *tailPair) compare(step int, what string) {
	p.t.Helper()
	used := int64(0)
	for k := range p.names {
		a, b := p.st[0][k].Stats(), p.st[1][k].Stats()
		if a != b {
			p.t.Fatalf("step %d (%s): stream %s stats differ:\ncached %+v\nplain  %+v", step, what, p.names[k], a, b)
		}
		if ga, gb := p.st[0][k].Gaps(), p.st[1][k].Gaps(); !reflect.DeepEqual(ga, gb) {
			p.t.Fatalf("step %d (%s): stream %s gaps differ: cached %v, plain %v", step, what, p.names[k], ga, gb)
		}
		// Deletes found through the cache leave Badger as those found
		// through an iterator do.
		if ka, kb := blockKeysFrom(p.t, p.s[0], p.st[0][k], 0), blockKeysFrom(p.t, p.s[1], p.st[1][k], 0); !reflect.DeepEqual(ka, kb) {
			p.t.Fatalf("step %d (%s): stream %s block keys differ:\ncached %x\nplain  %x", step, what, p.names[k], ka, kb)
		}
		used += checkTail(p.t, p.st[0][k])
		if n := checkTail(p.t, p.st[1][k]); n != 0 {
			p.t.Fatalf("step %d (%s): the store without a cache caches %d bytes", step, what, n)
		}
	}
	tc := p.s[0].TailCacheStats()
	if tc.Bytes != used || tc.Bytes > tc.Budget {
		p.t.Fatalf("step %d (%s): cache accounts %d bytes of budget %d, streams hold %d", step, what, tc.Bytes, tc.Budget, used)
	}
}

// checkTail checks a stream's cached blocks: contiguous, none below the
// head, the newest the stream's newest block, within the per-stream bounds
// and their cost counted right. It returns that cost.
func checkTail(t *testing.T, st *Stream) int64 {
	t.Helper()
	st.mu.Lock()
	defer st.mu.Unlock()
	cost := int64(0)
	for i, b := range st.tail {
		if i > 0 && b.first != st.tail[i-1].last+1 {
			t.Fatalf("stream %s: cached blocks not contiguous: %d..%d after %d", st.name, b.first, b.last, st.tail[i-1].last)
		}
		if b.last < st.m.head {
			t.Fatalf("stream %s: cached block %d..%d lies below the head %d", st.name, b.first, b.last, st.m.head)
		}
		br, err := openBlock(b.v, b.last, false, nil)
		if err != nil || br.firstSeq != b.first {
			t.Fatalf("stream %s: cached block %d..%d: %v (first %d)", st.name, b.first, b.last, err, br.firstSeq)
		}
		cost += b.cost()
	}
	if n := len(st.tail); n > 0 && st.tail[n-1].last+1 != st.m.next {
		t.Fatalf("stream %s: newest cached block ends at %d, stream at %d", st.name, st.tail[n-1].last, st.m.next-1)
	}
	if cost != st.tailBytes || cost > tailStreamBytes || len(st.tail) > tailStreamBlocks {
		t.Fatalf("stream %s: %d cached blocks cost %d, counted %d", st.name, len(st.tail), cost, st.tailBytes)
	}
	return cost
}

// corruption says which block corrupt damaged.
type corruption struct {
	last   uint64
	cached bool
}

// corrupt overwrites one live block of stream k with garbage in both
// stores, then reads the stream from its head, which finds the block
// corrupt and drops it as a gap. It damages only streams whose read from
// the head goes to Badger in the cached store too: a block damaged under a
// cached copy would be read intact from the cache, a difference that only
// corruption while the store is open can make. The damaged block itself may
// be cached; the drop must then take it out of the cache.
func (p *tailPair) corrupt(k int, rng *rand.Rand) (corruption, bool) {
	p.t.Helper()
	st := p.st[0][k]
	st.mu.Lock()
	tail, head, next := st.tail, st.m.head, st.readable
	st.mu.Unlock()
	if _, ok := tailFind(tail, head, next); ok || head == next {
		return corruption{}, false
	}
	var keys [2][][]byte
	for i := range p.s {
		keys[i] = blockKeysFrom(p.t, p.s[i], p.st[i][k], head)
	}
	if !reflect.DeepEqual(keys[0], keys[1]) || len(keys[0]) == 0 {
		p.t.Fatalf("stream %s: block keys differ or are missing: %x / %x", p.names[k], keys[0], keys[1])
	}
	key := keys[0][rng.IntN(len(keys[0]))]
	b, _ := parseBlockKey(key)
	c := corruption{last: b.lastSeq}
	for _, tb := range tail {
		c.cached = c.cached || tb.last == b.lastSeq
	}
	for i := range p.s {
		err := p.s[i].db.Update(func(txn *badger.Txn) error { return txn.Set(key, []byte("not a block at all")) })
		if err != nil {
			p.t.Fatal(err)
		}
	}
	a, bb := scanAll(p.st[0][k], head, 1<<20, 1<<30, -1), scanAll(p.st[1][k], head, 1<<20, 1<<30, -1)
	if !reflect.DeepEqual(a, bb) {
		p.t.Fatalf("stream %s: reading past the corrupt block %d: cached %v, plain %v", p.names[k], b.lastSeq, seqs(a.Recs), seqs(bb.Recs))
	}
	return c, true
}

// blockKeysFrom lists the keys of a stream's blocks that end at or after seq.
func blockKeysFrom(t *testing.T, s *Store, st *Stream, seq uint64) [][]byte {
	t.Helper()
	var keys [][]byte
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: streamBlockPrefix(st.num), PrefetchValues: false})
		defer it.Close()
		for it.Seek(blockSeekKey(st.num, seq)); it.Valid(); it.Next() {
			keys = append(keys, it.Item().KeyCopy(nil))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// seqs shortens records to their sequence numbers for failure messages.
func seqs(recs []Record) []uint64 {
	out := make([]uint64, len(recs))
	for i, r := range recs {
		out[i] = r.Seq
	}
	return out
}

// TestTailCacheSteadyState checks that the uplink's steady state (append a
// small batch, scan it, ack it) is answered from the cache, over many
// streams sharing the store, and that acks leave nothing cached.
func TestTailCacheSteadyState(t *testing.T) {
	s := openTest(t, t.TempDir(), Options{Durability: DurabilityNone})
	ctx := context.Background()
	streams := make([]*Stream, 20)
	for i := range streams {
		var err error
		if streams[i], err = s.Stream(fmt.Sprintf("dev-%d", i), StreamOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	const rounds = 300
	for i := range rounds {
		st := streams[i%len(streams)]
		r, err := st.Append(ctx, recs(i*10, 1+i%3))
		if err != nil {
			t.Fatal(err)
		}
		got := scanAll(st, r.First, 100, 1<<20, -1)
		if got.N != int(r.Len()) || got.Recs[0].Seq != r.First || string(got.Recs[0].Data) != fmt.Sprintf("event-%08d", i*10) {
			t.Fatalf("round %d: scan of %v gave %d records %v", i, r, got.N, seqs(got.Recs))
		}
		if err := st.Ack(r.Last); err != nil {
			t.Fatal(err)
		}
	}
	tc := s.TailCacheStats()
	if tc.Hits != rounds || tc.Misses != 0 || tc.Bytes != 0 || tc.Off {
		t.Fatalf("after %d append-scan-ack rounds: %+v, want every scan a hit and nothing left cached", rounds, tc)
	}
}

// TestTailCacheHidesUnsynced checks that in the interval mode a cached
// block that is not yet synced stays invisible: a read served from the
// cache stops before it, as a read from Badger does.
func TestTailCacheHidesUnsynced(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir(), Options{Durability: DurabilityInterval, SyncInterval: 300 * time.Millisecond})
	st, err := s.Stream("d", StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	readable := func() uint64 {
		st.mu.Lock()
		defer st.mu.Unlock()
		return st.readable
	}
	for attempt := 0; ; attempt++ {
		a, err := st.Append(ctx, recs(0, 3), AppendOptions{WaitDurable: true})
		if err != nil {
			t.Fatal(err)
		}
		b, err := st.Append(ctx, recs(3, 4))
		if err != nil {
			t.Fatal(err)
		}
		before, hits := readable(), s.TailCacheStats().Hits
		got := scanAll(st, a.First, 100, 1<<20, -1)
		if before != a.Last+1 || readable() != before {
			// The next sync came between the appends and the read: the
			// unsynced block was not unsynced throughout.
			if attempt == 5 {
				t.Fatal("could not read between an append and the next sync")
			}
			continue
		}
		if got.N != int(a.Len()) || got.Recs[got.N-1].Seq != a.Last {
			t.Fatalf("read %v while %v was not synced, want only %v", seqs(got.Recs), b, a)
		}
		if s.TailCacheStats().Hits != hits+1 {
			t.Fatalf("the read did not come from the cache: %+v", s.TailCacheStats())
		}
		if _, err := st.Append(ctx, recs(7, 1), AppendOptions{WaitDurable: true}); err != nil {
			t.Fatal(err)
		}
		if got := scanAll(st, a.First, 100, 1<<20, -1); got.N != int(a.Len()+b.Len()+1) {
			t.Fatalf("after the sync: read %v", seqs(got.Recs))
		}
		return
	}
}

// TestTailCacheConcurrentReaders appends, acks and reads one stream from
// several goroutines at once (run it with -race) and checks that every
// read gives consecutive records with the data appended under their
// sequence numbers, from the cache or from Badger.
func TestTailCacheConcurrentReaders(t *testing.T) {
	s := openTest(t, t.TempDir(), Options{Durability: DurabilityInterval, SyncInterval: 2 * time.Millisecond, TailCacheBytes: 32 << 10, MaxBlockBytes: 1 << 10})
	st, err := s.Stream("d", StreamOptions{MaxBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	report := func(err error) {
		select {
		case errs <- err:
		default: // enough to fail on
		}
	}
	wg.Add(1)
	go func() { // the appender, acking now and then
		defer wg.Done()
		defer cancel()
		rng := rand.New(rand.NewPCG(1, 2))
		next := uint64(1)
		for i := 0; i < 3000; i++ {
			batch := make([][]byte, 1+rng.IntN(8))
			for j := range batch {
				batch[j] = fmt.Appendf(nil, "seq-%d-%x", next+uint64(j), make([]byte, rng.IntN(200)))
			}
			r, err := st.Append(ctx, batch)
			if err != nil || r.First != next {
				report(fmt.Errorf("append %d: %v %v", i, r, err))
				return
			}
			next = r.Last + 1
			if rng.IntN(4) == 0 {
				if err := st.Ack(r.Last - uint64(rng.IntN(int(r.Last)))); err != nil {
					report(err)
					return
				}
			}
		}
	}()
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 3))
			for ctx.Err() == nil {
				// Mostly the newest records, as the uplink reads, now and
				// then further back; with pauses, to leave the appender CPU.
				time.Sleep(time.Duration(rng.IntN(300)) * time.Microsecond)
				stats := st.Stats()
				from := stats.Next - min(stats.Next, uint64(rng.IntN(40)))
				if rng.IntN(8) == 0 {
					from = stats.Head + uint64(rng.IntN(int(stats.Depth)+1))
				}
				want := uint64(0)
				_, err := st.Scan(from, 1+rng.IntN(50), 1+rng.IntN(4000), func(seq uint64, rec []byte) bool {
					if (want != 0 && seq != want) || seq < from || !bytes.HasPrefix(rec, fmt.Appendf(nil, "seq-%d-", seq)) {
						report(fmt.Errorf("read from %d: record %d (%.20q) after %d", from, seq, rec, want-1))
					}
					want = seq + 1
					return true
				})
				if err != nil && !errors.Is(err, ErrClosed) {
					report(err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	tc := s.TailCacheStats()
	t.Logf("%+v", tc)
	if tc.Hits == 0 {
		t.Fatalf("no read came from the cache: %+v", tc)
	}
}

// TestTailCacheOptions checks the budget's defaults per profile, its bound,
// and that a negative budget turns the cache off.
func TestTailCacheOptions(t *testing.T) {
	for _, c := range []struct {
		p    Profile
		want int64
	}{{ProfileDefault, 8 << 20}, {ProfileLowMemory, 256 << 10}} {
		o := Options{Profile: c.p}
		o.EnsureDefaults()
		if o.TailCacheBytes != c.want {
			t.Errorf("profile %s: tail cache %d, want %d", c.p, o.TailCacheBytes, c.want)
		}
	}
	o := Options{TailCacheBytes: 2 << 30}
	o.EnsureDefaults()
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "tail cache bytes") {
		t.Errorf("a 2 GiB tail cache: %v", err)
	}
	s := openTest(t, t.TempDir(), Options{Durability: DurabilityNone, TailCacheBytes: -1})
	st, _ := s.Stream("d", StreamOptions{})
	if _, err := st.Append(context.Background(), recs(0, 3)); err != nil {
		t.Fatal(err)
	}
	if got := scanAll(st, 1, 10, 1<<20, -1); got.N != 3 {
		t.Fatalf("read %d records", got.N)
	}
	if tc := s.TailCacheStats(); !tc.Off || tc.Hits != 0 || tc.Misses != 1 || tc.Bytes != 0 {
		t.Fatalf("cache off: %+v", tc)
	}
}
