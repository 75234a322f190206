package aggregate

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

func fullResults(t testing.TB, e *Engine) string {
	var out string
	for _, q := range allQueries() {
		out += fmt.Sprint(mustQuery(t, e, q))
	}
	return out
}

// TestSnapshotRestoreAndRebuild: a restored engine continues exactly like
// the original (same snapshot bytes, same answers, lateness included), and
// a rebuild from the same batches gives the same state.
func TestSnapshotRestoreAndRebuild(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	batches := deliver(r, genFleet(r))
	for _, evict := range []time.Duration{time.Minute, 1000 * time.Hour} {
		t.Run(fmt.Sprint("evict_after=", evict), func(t *testing.T) {
			opt := propOptions()
			opt.EvictAfter = evict
			whole := runAll(t, opt, batches)

			half := applyAll(t, opt, batches[:len(batches)/2])
			snap, err := half.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			opt2 := opt
			opt2.Store = NewMemStore()
			restored := applyAll(t, opt2, nil)
			if err := restored.Restore(snap); err != nil {
				t.Fatal(err)
			}
			if again, _ := restored.Snapshot(); !bytes.Equal(again, snap) {
				t.Fatal("snapshot of a restored engine differs")
			}
			for _, b := range batches[len(batches)/2:] {
				if err := restored.Apply(b); err != nil {
					t.Fatal(err)
				}
			}
			restored.Tick()
			if a, b := fullResults(t, whole), fullResults(t, restored); a != b {
				t.Fatal("restored engine answers differently")
			}
			rebuilt := runAll(t, opt, batches)
			s1, _ := whole.Snapshot()
			s2, _ := rebuilt.Snapshot()
			if !bytes.Equal(s1, s2) {
				t.Fatal("rebuild gives a different state")
			}
		})
	}
}

// TestEvictionKeepsAnswers: evicting final partials to the store (and
// reloading them for late data) changes no answer.
func TestEvictionKeepsAnswers(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	batches := deliver(r, genFleet(r))
	opt := propOptions()
	opt.EvictAfter = 1000 * time.Hour
	live := runAll(t, opt, batches)
	opt.EvictAfter = time.Second
	opt.Store = NewMemStore()
	evicted := runAll(t, opt, batches)
	if s := evicted.Stats(); s.Evicted == 0 || s.LivePartials != 0 {
		t.Fatalf("nothing evicted: %+v", s)
	}
	if a, b := fullResults(t, live), fullResults(t, evicted); a != b {
		t.Fatal("answers differ after eviction")
	}
}

// durableStore hides MemStore's Snapshotter: like a Badger store, its
// content survives a crash independently of the engine's checkpoint.
type durableStore struct{ m *MemStore }

func (d durableStore) Put(t uint8, s uint32, b int64, data []byte) error {
	return d.m.Put(t, s, b, data)
}
func (d durableStore) Get(t uint8, s uint32, b int64) ([]byte, bool, error) {
	return d.m.Get(t, s, b)
}
func (d durableStore) Scan(t uint8, s uint32, from, to int64, fn func(int64, []byte) bool) error {
	return d.m.Scan(t, s, from, to, fn)
}
func (d durableStore) Replace(s uint32, from uint8, lo, hi int64, to uint8, puts []StoredPartial) error {
	return d.m.Replace(s, from, lo, hi, to, puts)
}
func (d durableStore) DeleteRange(t uint8, s uint32, from, to int64) (int, error) {
	return d.m.DeleteRange(t, s, from, to)
}

// TestReplayIntoStoredPartial: after a crash, replaying batches logged
// after the checkpoint does not double-count late events already merged
// into a partial of a durable store.
func TestReplayIntoStoredPartial(t *testing.T) {
	opt := testOptions()
	opt.EvictAfter = time.Minute
	opt.Store = durableStore{NewMemStore()}
	e := newEngine(t, opt)
	var seq uint64
	b1 := series10s("a", 1, &seq, 0, time.Hour, at(time.Hour))
	b1.Seq = 1
	mustApply(t, e, b1)
	snap, _ := e.Snapshot() // checkpoint
	late := batchOf("a", 1, at(time.Hour+time.Second), ev{seq: 9999, metric: "m", v: 5, t: at(5 * time.Second)})
	late.Seq = 2
	mustApply(t, e, late) // reloads bucket 0 from the store and merges
	b3 := series10s("a", 1, &seq, time.Hour, 2*time.Hour, at(2*time.Hour))
	b3.Seq = 3
	mustApply(t, e, b3) // evicts bucket 0 again, with the late event
	q := Query{Metric: "m", Window: WindowSpec{Kind: Tumbling, Size: time.Minute}, From: t0, To: t0.Add(time.Minute)}
	want := mustQuery(t, e, q)[0]

	e2 := newEngine(t, opt) // restart on the same durable store
	if err := e2.Restore(snap); err != nil {
		t.Fatal(err)
	}
	mustApply(t, e2, late)
	mustApply(t, e2, b3)
	got := mustQuery(t, e2, q)[0]
	if got.Count != want.Count || got.Sum != want.Sum || got.Count != 7 {
		t.Fatalf("after replay count %d sum %v, want %d %v", got.Count, got.Sum, want.Count, want.Sum)
	}
	if n := e2.Stats().ReplaySkipped; n != 1 {
		t.Fatalf("replay skipped %d, want 1", n)
	}
}

// TestRestoreRejects: corrupt and incompatible snapshots are classified
// errors and leave the engine unchanged.
func TestRestoreRejects(t *testing.T) {
	e := newEngine(t, testOptions())
	var seq uint64
	mustApply(t, e, series10s("a", 1, &seq, 0, time.Minute, at(time.Minute)))
	snap, _ := e.Snapshot()
	before := fmt.Sprint(mustQuery(t, e, dayQuery("m", WindowSpec{Kind: Tumbling, Size: time.Minute})))
	for i := 0; i < len(snap); i += 7 {
		if err := e.Restore(snap[:i]); !errors.Is(err, ErrCorruptSnapshot) {
			t.Fatalf("truncated at %d: %v", i, err)
		}
	}
	opt := testOptions()
	opt.Resolution = 5 * time.Second
	other := newEngine(t, opt)
	if err := other.Restore(snap); !errors.Is(err, ErrIncompatibleSnapshot) {
		t.Fatalf("other resolution: %v", err)
	}
	if after := fmt.Sprint(mustQuery(t, e, dayQuery("m", WindowSpec{Kind: Tumbling, Size: time.Minute}))); after != before {
		t.Fatal("failed restore changed the engine")
	}
}

// FuzzRestore: Restore never panics on arbitrary input.
func FuzzRestore(f *testing.F) {
	e := newEngine(f, testOptions())
	var seq uint64
	mustApply(f, e, series10s("a", 1, &seq, 0, time.Minute, at(time.Minute)))
	snap, _ := e.Snapshot()
	f.Add(snap)
	opt := testOptions()
	opt.StreamBuffer, opt.LateLogSize = 16, 16 // cheap engines per input
	f.Fuzz(func(t *testing.T, b []byte) {
		_ = newEngine(t, opt).Restore(b)
	})
}

// TestLateIntoFullyEvictedSeries: a late event for a series none of whose
// partials are in memory any more reloads the stored partial and merges
// into it, rather than starting a new partial that hides the stored one.
func TestLateIntoFullyEvictedSeries(t *testing.T) {
	opt := testOptions()
	opt.EvictAfter = time.Minute
	opt.Store = NewMemStore()
	e := newEngine(t, opt)
	var seqA, seqB uint64
	mustApply(t, e, series10s("a", 1, &seqA, 0, time.Minute, at(time.Minute)))
	// Another device moves the watermark two hours on; device a goes idle.
	mustApply(t, e, series10s("b", 2, &seqB, 2*time.Hour, 2*time.Hour+time.Minute, at(2*time.Hour+time.Minute)))
	mustApply(t, e, series10s("b", 2, &seqB, 2*time.Hour+time.Minute, 2*time.Hour+2*time.Minute, at(2*time.Hour+2*time.Minute)))
	if s := e.Stats(); s.Evicted == 0 {
		t.Fatalf("nothing evicted: %+v", s)
	}
	late := batchOf("a", 1, at(2*time.Hour+3*time.Minute), ev{seq: seqA + 1, metric: "m", v: 1, t: at(5 * time.Second)})
	mustApply(t, e, late)
	q := Query{Metric: "m", Window: WindowSpec{Kind: Tumbling, Size: time.Minute}, From: t0, To: t0.Add(time.Minute), GroupBy: []string{"device"}}
	got := mustQuery(t, e, q)
	if len(got) != 1 || got[0].Count != 7 || got[0].Late != 1 {
		t.Fatalf("window [0, 1m) of device a after a late event into evicted partials: %+v (want count 7 = 6 stored + 1 late, late 1)", got)
	}
}
