package natslog_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"edgeflow/hub/natslog"
	"edgeflow/internal/testnats"
)

// openSnapshots opens the snapshot store over js, failing the test on error.
func openSnapshots(t testing.TB, js jetstream.JetStream, opts natslog.SnapshotOptions) *natslog.Snapshots {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	s, err := natslog.OpenSnapshots(ctx, js, opts)
	if err != nil {
		t.Fatalf("OpenSnapshots: %v", err)
	}
	return s
}

// randomState returns n pseudo-random bytes from seed.
func randomState(seed int64, n int) []byte {
	b := make([]byte, n)
	rand.New(rand.NewSource(seed)).Read(b)
	return b
}

// sampleSnapshot is a snapshot with positions for a few partitions and a
// state derived from seed.
func sampleSnapshot(seed int64, size int, basis uint64) natslog.Snapshot {
	pos := map[int]uint64{}
	for p := 0; p < 64; p += 3 {
		pos[p] = uint64(seed)*1000 + uint64(p)
	}
	pos[1023] = 1 << 40
	return natslog.Snapshot{
		Positions:  pos,
		State:      randomState(seed, size),
		Taken:      time.Date(2026, 12, 6, 3, 0, 0, int(seed), time.UTC),
		Hub:        fmt.Sprintf("hub-%d", seed),
		Generation: basis,
	}
}

// sameSnapshot fails the test unless got holds want's content at gen.
func sameSnapshot(t testing.TB, got, want natslog.Snapshot, gen uint64) {
	t.Helper()
	if got.Generation != gen || got.Hub != want.Hub || !got.Taken.Equal(want.Taken) {
		t.Fatalf("got generation %d hub %q taken %v, want %d %q %v", got.Generation, got.Hub, got.Taken, gen, want.Hub, want.Taken)
	}
	if len(got.Positions) != len(want.Positions) {
		t.Fatalf("got %d positions, want %d", len(got.Positions), len(want.Positions))
	}
	for p, seq := range want.Positions {
		if got.Positions[p] != seq {
			t.Fatalf("partition %d at %d, want %d", p, got.Positions[p], seq)
		}
	}
	if !bytes.Equal(got.State, want.State) {
		t.Fatalf("state of %d bytes differs from the %d bytes put", len(got.State), len(want.State))
	}
}

// objectNames lists the snapshot bucket's objects.
func objectNames(t testing.TB, js jetstream.JetStream, bucket string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	obs, err := js.ObjectStore(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	list, err := obs.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, o := range list {
		names = append(names, o.Name)
	}
	return names
}

// TestSnapshotPutLatestKeep stores six generations: each is read back
// whole, and after each Put only the Keep newest objects (and their
// metadata records) remain in the bucket.
func TestSnapshotPutLatestKeep(t *testing.T) {
	c := testnats.Start(t, 1)
	_, js := connect(t, c.URLs())
	s := openSnapshots(t, js, natslog.SnapshotOptions{Replicas: 1})
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	if _, err := s.Latest(ctx); !errors.Is(err, natslog.ErrNoSnapshot) {
		t.Fatalf("Latest of an empty bucket: %v, want ErrNoSnapshot", err)
	}
	var basis uint64
	for i := int64(1); i <= 6; i++ {
		want := sampleSnapshot(i, 300_000+int(i), basis)
		gen, err := s.Put(ctx, want)
		if err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
		if gen != basis+1 {
			t.Fatalf("put %d: generation %d, want %d", i, gen, basis+1)
		}
		basis = gen
		got, err := s.Latest(ctx)
		if err != nil {
			t.Fatalf("latest after put %d: %v", i, err)
		}
		sameSnapshot(t, got, want, gen)
		if names := objectNames(t, js, natslog.DefaultSnapshotBucket); len(names) != min(int(i), natslog.DefaultSnapshotKeep) {
			t.Fatalf("after put %d the bucket holds %v, want the %d newest", i, names, natslog.DefaultSnapshotKeep)
		}
	}
	st, err := js.Stream(ctx, "OBJ_"+natslog.DefaultSnapshotBucket)
	if err != nil {
		t.Fatal(err)
	}
	// Two objects of 3 chunks (128 KiB each) and their metadata records:
	// deleted generations leave nothing behind.
	if n := st.CachedInfo().State.Msgs; n != 2*3+2 {
		t.Fatalf("object stream holds %d messages, want %d", n, 2*3+2)
	}
	if got := s.Stats(); got != (natslog.SnapshotStats{}) {
		t.Fatalf("stats %+v after clean puts, want zero", got)
	}
}

// TestSnapshotConflict: a writer whose expected generation is stale is
// refused, and of eight writers racing from the same generation exactly
// one wins; the losers' objects are deleted.
func TestSnapshotConflict(t *testing.T) {
	c := testnats.Start(t, 1)
	_, jsA := connect(t, c.URLs())
	_, jsB := connect(t, c.URLs())
	a := openSnapshots(t, jsA, natslog.SnapshotOptions{Replicas: 1})
	b := openSnapshots(t, jsB, natslog.SnapshotOptions{Replicas: 1})
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	g1, err := a.Put(ctx, sampleSnapshot(1, 1000, 0))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Put(ctx, sampleSnapshot(2, 1000, 0)); !errors.Is(err, natslog.ErrSnapshotConflict) {
		t.Fatalf("second first-writer: %v, want ErrSnapshotConflict", err)
	}
	g2, err := a.Put(ctx, sampleSnapshot(3, 1000, g1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Put(ctx, sampleSnapshot(4, 1000, g1)); !errors.Is(err, natslog.ErrSnapshotConflict) {
		t.Fatalf("writer expecting generation %d after %d was put: %v, want ErrSnapshotConflict", g1, g2, err)
	}

	const writers = 8
	var wg sync.WaitGroup
	errs := make([]error, writers)
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := a
			if i%2 == 1 {
				s = b
			}
			_, errs[i] = s.Put(ctx, sampleSnapshot(int64(10+i), 400_000, g2))
		}()
	}
	wg.Wait()
	won := -1
	for i, err := range errs {
		switch {
		case err == nil && won >= 0:
			t.Fatalf("writers %d and %d both won from generation %d", won, i, g2)
		case err == nil:
			won = i
		case !errors.Is(err, natslog.ErrSnapshotConflict):
			t.Fatalf("writer %d: %v, want success or ErrSnapshotConflict", i, err)
		}
	}
	if won < 0 {
		t.Fatal("no writer won")
	}
	got, err := b.Latest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sameSnapshot(t, got, sampleSnapshot(int64(10+won), 400_000, 0), g2+1)
	if names := objectNames(t, jsA, natslog.DefaultSnapshotBucket); len(names) != 2 {
		t.Fatalf("bucket holds %v after the race, want generations %d and %d only", names, g2, g2+1)
	}
}

// TestSnapshotCorruptFallback overwrites the latest generation's object
// through the Object Store (a valid object, other bytes): Latest says so
// and falls back to the previous generation; a Put naming the head
// generation continues; a deleted object is reported as missing, and with
// every kept generation unreadable Latest returns no snapshot.
func TestSnapshotCorruptFallback(t *testing.T) {
	c := testnats.Start(t, 1)
	_, js := connect(t, c.URLs())
	s := openSnapshots(t, js, natslog.SnapshotOptions{Replicas: 1})
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	first := sampleSnapshot(1, 200_000, 0)
	if _, err := s.Put(ctx, first); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, sampleSnapshot(2, 200_000, 1)); err != nil {
		t.Fatal(err)
	}
	obs, err := js.ObjectStore(ctx, natslog.DefaultSnapshotBucket)
	if err != nil {
		t.Fatal(err)
	}
	names := objectNames(t, js, natslog.DefaultSnapshotBucket) // sorted by generation
	if len(names) != 2 {
		t.Fatalf("bucket holds %v, want 2 objects", names)
	}
	orig, err := obs.GetBytes(ctx, names[1])
	if err != nil {
		t.Fatal(err)
	}
	flipped := bytes.Clone(orig)
	flipped[len(flipped)/2] ^= 0x40
	if _, err := obs.PutBytes(ctx, names[1], flipped); err != nil {
		t.Fatal(err)
	}
	got, err := s.Latest(ctx)
	var fb *natslog.SnapshotFallbackError
	if !errors.As(err, &fb) || !errors.Is(err, natslog.ErrSnapshotFallback) || !errors.Is(err, natslog.ErrCorruptSnapshot) {
		t.Fatalf("latest with generation 2 flipped: %v, want a fallback for corruption", err)
	}
	if fb.Head != 2 || fb.Used != 1 {
		t.Fatalf("fallback from %d to %d, want 2 to 1", fb.Head, fb.Used)
	}
	sameSnapshot(t, got, first, 1)
	if _, err := s.Put(ctx, sampleSnapshot(3, 200_000, 1)); !errors.Is(err, natslog.ErrSnapshotConflict) {
		t.Fatalf("put naming the fallen-back generation: %v, want ErrSnapshotConflict (the head is 2)", err)
	}
	third := sampleSnapshot(3, 200_000, fb.Head)
	if g, err := s.Put(ctx, third); err != nil || g != 3 {
		t.Fatalf("put after the fallback: generation %d, %v; want 3", g, err)
	}
	if got, err := s.Latest(ctx); err != nil {
		t.Fatalf("latest after a good put: %v", err)
	} else {
		sameSnapshot(t, got, third, 3)
	}

	// Kept now: 3 (good) and 2 (corrupt). Delete 3's object.
	names = objectNames(t, js, natslog.DefaultSnapshotBucket)
	if err := obs.Delete(ctx, names[1]); err != nil {
		t.Fatal(err)
	}
	_, err = s.Latest(ctx)
	if err == nil || errors.Is(err, natslog.ErrSnapshotFallback) || !errors.Is(err, natslog.ErrSnapshotMissing) || !errors.Is(err, natslog.ErrCorruptSnapshot) {
		t.Fatalf("latest with 3 deleted and 2 corrupt: %v, want missing and corrupt, no fallback", err)
	}
	if st := s.Stats(); st.Fallbacks != 1 || st.Unreadable != 3 {
		t.Fatalf("stats %+v, want 1 fallback and 3 unreadable generations", st)
	}

	// A truncated object of the right name (other size) is corrupt too.
	if _, err := s.Put(ctx, sampleSnapshot(4, 200_000, 3)); err != nil {
		t.Fatal(err)
	}
	names = objectNames(t, js, natslog.DefaultSnapshotBucket)
	last := names[len(names)-1]
	if _, err := obs.PutBytes(ctx, last, orig[:1000]); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Latest(ctx); !errors.Is(err, natslog.ErrCorruptSnapshot) {
		t.Fatalf("latest with a truncated object: %v, want ErrCorruptSnapshot", err)
	}
}

// TestSnapshotSizeBound: a snapshot over MaxBytes is refused before
// anything is stored, a reader with a smaller MaxBytes refuses one a
// writer stored, and a corrupt pointer is reported as such.
func TestSnapshotSizeBound(t *testing.T) {
	c := testnats.Start(t, 1)
	_, js := connect(t, c.URLs())
	small := openSnapshots(t, js, natslog.SnapshotOptions{Replicas: 1, MaxBytes: 1 << 20})
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	if _, err := small.Put(ctx, sampleSnapshot(1, 1<<20, 0)); !errors.Is(err, natslog.ErrSnapshotTooLarge) {
		t.Fatalf("put of 1 MiB state with MaxBytes 1 MiB: %v, want ErrSnapshotTooLarge", err)
	}
	if _, err := small.Latest(ctx); !errors.Is(err, natslog.ErrNoSnapshot) {
		t.Fatalf("latest after a refused put: %v, want ErrNoSnapshot", err)
	}
	if names := objectNames(t, js, natslog.DefaultSnapshotBucket); len(names) != 0 {
		t.Fatalf("refused put left objects %v", names)
	}
	if _, err := small.Put(ctx, natslog.Snapshot{Hub: string(make([]byte, 256))}); !errors.Is(err, natslog.ErrInvalidSnapshot) {
		t.Fatalf("put with a 256-byte hub id: %v, want ErrInvalidSnapshot", err)
	}
	if _, err := small.Put(ctx, natslog.Snapshot{Positions: map[int]uint64{1024: 1}}); !errors.Is(err, natslog.ErrInvalidSnapshot) {
		t.Fatalf("put with partition 1024: %v, want ErrInvalidSnapshot", err)
	}

	big := openSnapshots(t, js, natslog.SnapshotOptions{Replicas: 1, MaxBytes: 4 << 20})
	if _, err := big.Put(ctx, sampleSnapshot(2, 2<<20, 0)); err != nil {
		t.Fatal(err)
	}
	small = openSnapshots(t, js, natslog.SnapshotOptions{Replicas: 1, MaxBytes: 1 << 20})
	if _, err := small.Latest(ctx); !errors.Is(err, natslog.ErrSnapshotTooLarge) {
		t.Fatalf("latest of a 2 MiB snapshot with MaxBytes 1 MiB: %v, want ErrSnapshotTooLarge", err)
	}

	kv, err := js.KeyValue(ctx, natslog.DefaultSnapshotBucket+"_HEAD")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "latest", []byte{1, 1, 0, 0}); err != nil {
		t.Fatal(err)
	}
	if _, err := big.Latest(ctx); !errors.Is(err, natslog.ErrCorruptSnapshot) {
		t.Fatalf("latest with a 4-byte pointer: %v, want ErrCorruptSnapshot", err)
	}
	if _, err := natslog.OpenSnapshots(ctx, js, natslog.SnapshotOptions{Keep: 17}); !errors.Is(err, natslog.ErrInvalidOption) {
		t.Fatalf("Keep 17: %v, want ErrInvalidOption", err)
	}
}

// TestSnapshotLarge round-trips a 50 MB state.
func TestSnapshotLarge(t *testing.T) {
	c := testnats.Start(t, 1)
	_, js := connect(t, c.URLs())
	s := openSnapshots(t, js, natslog.SnapshotOptions{Replicas: 1, MaxBytes: 64 << 20})
	ctx, cancel := context.WithTimeout(context.Background(), 2*within)
	defer cancel()
	want := sampleSnapshot(7, 50_000_000, 0)
	if _, err := s.Put(ctx, want); err != nil {
		t.Fatal(err)
	}
	got, err := s.Latest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sameSnapshot(t, got, want, 1)
}

// TestSnapshotClusterKill stores two generations on three servers (R3),
// SIGKILLs the object bucket's stream leader, and reads the latest
// through a survivor; a Put succeeds with the server down and both
// generations read after it restarts.
func TestSnapshotClusterKill(t *testing.T) {
	c := testnats.Start(t, 3)
	_, js := connect(t, c.URLs())
	s := openSnapshots(t, js, natslog.SnapshotOptions{Replicas: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 2*within)
	defer cancel()
	if _, err := s.Put(ctx, sampleSnapshot(1, 1_000_000, 0)); err != nil {
		t.Fatal(err)
	}
	second := sampleSnapshot(2, 3_000_000, 1)
	if _, err := s.Put(ctx, second); err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, "OBJ_"+natslog.DefaultSnapshotBucket)
	if err != nil {
		t.Fatal(err)
	}
	leader := c.Index(st.CachedInfo().Cluster.Leader)
	if leader < 0 {
		t.Fatalf("object stream leader %q is not a node", st.CachedInfo().Cluster.Leader)
	}
	c.Kill(leader)
	t.Logf("killed %s, the object stream's leader", c.Nodes[leader].Name)

	// Until the survivors elect a leader a read can time out; the hub
	// retries the same way.
	retry := func(what string, f func(context.Context) error) {
		t.Helper()
		for {
			actx, acancel := context.WithTimeout(ctx, 10*time.Second)
			err := f(actx)
			acancel()
			if err == nil {
				return
			}
			if ctx.Err() != nil || errors.Is(err, natslog.ErrCorruptSnapshot) {
				t.Fatalf("%s: %v", what, err)
			}
			t.Logf("%s: %v; retrying", what, err)
			time.Sleep(500 * time.Millisecond)
		}
	}
	retry("latest with the leader killed", func(ctx context.Context) error {
		got, err := s.Latest(ctx)
		if err == nil {
			sameSnapshot(t, got, second, 2)
		}
		return err
	})
	third := sampleSnapshot(3, 2_000_000, 2)
	retry("put with a server down", func(ctx context.Context) error {
		g, err := s.Put(ctx, third)
		if errors.Is(err, natslog.ErrSnapshotConflict) {
			// An earlier attempt's pointer update may have been stored
			// with its reply lost: then the latest is this snapshot.
			got, lerr := s.Latest(ctx)
			if lerr != nil {
				return lerr
			}
			sameSnapshot(t, got, third, 3)
			return nil
		}
		if err == nil && g != 3 {
			t.Fatalf("put with a server down: generation %d, want 3", g)
		}
		return err
	})
	c.Restart(leader)
	retry("latest after the restart", func(ctx context.Context) error {
		got, err := s.Latest(ctx)
		if err == nil {
			sameSnapshot(t, got, third, 3)
		}
		return err
	})
}

// TestSnapshotOrphansPruned leaves objects behind as writers that died
// before moving the pointer would. Two of the current generation: Put
// deletes them before writing, so its snapshot still fits the bucket's
// bound. One of the next generation (possibly a live writer's, so kept
// while Put writes): deleted once the pointer has passed it.
func TestSnapshotOrphansPruned(t *testing.T) {
	c := testnats.Start(t, 1)
	_, js := connect(t, c.URLs())
	s := openSnapshots(t, js, natslog.SnapshotOptions{Replicas: 1, MaxBytes: 1 << 20, Keep: 1})
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	const size = 900_000
	if _, err := s.Put(ctx, sampleSnapshot(1, size, 0)); err != nil {
		t.Fatal(err)
	}
	obs, err := js.ObjectStore(ctx, natslog.DefaultSnapshotBucket)
	if err != nil {
		t.Fatal(err)
	}
	orphan := func(name string, size int) {
		t.Helper()
		if _, err := obs.PutBytes(ctx, name, randomState(int64(len(name)), size)); err != nil {
			t.Fatalf("orphan %s: %v", name, err)
		}
	}
	orphan("snapshot-00000000000000000001-00000000000000a1", size)
	orphan("snapshot-00000000000000000001-00000000000000a2", size)
	// The bucket holds Keep+2 = 3 snapshots of MaxBytes: a fourth of
	// 900 KB being written would not fit beside them.
	want := sampleSnapshot(2, size, 1)
	if _, err := s.Put(ctx, want); err != nil {
		t.Fatalf("put with two dead objects in the bucket: %v", err)
	}
	names := objectNames(t, js, natslog.DefaultSnapshotBucket)
	if len(names) != 1 || !strings.HasPrefix(names[0], "snapshot-00000000000000000002-") {
		t.Fatalf("bucket holds %v after the put, want generation 2's object only", names)
	}

	next := "snapshot-00000000000000000003-00000000000000c1"
	orphan(next, 10_000)
	want = sampleSnapshot(3, size, 2)
	if _, err := s.Put(ctx, want); err != nil {
		t.Fatal(err)
	}
	names = objectNames(t, js, natslog.DefaultSnapshotBucket)
	if len(names) != 1 || !strings.HasPrefix(names[0], "snapshot-00000000000000000003-") || names[0] == next {
		t.Fatalf("bucket holds %v after the put, want generation 3's object only", names)
	}
	got, err := s.Latest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sameSnapshot(t, got, want, 3)
}
