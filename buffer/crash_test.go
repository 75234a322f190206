package buffer

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The crash child appends in sync mode and prints every range Append
// returned; the parent kills it with SIGKILL at a random moment.
func init() {
	dir := os.Getenv("BUFFER_CRASH_CHILD")
	if dir == "" {
		return
	}
	s, err := Open(dir, Options{Durability: DurabilitySync, Logger: quietLogger()})
	if err != nil {
		fmt.Println("open error:", err)
		os.Exit(3)
	}
	st, err := s.Stream("crash", StreamOptions{})
	if err != nil {
		fmt.Println("stream error:", err)
		os.Exit(3)
	}
	w := bufio.NewWriter(os.Stdout)
	rng := rand.New(rand.NewPCG(uint64(os.Getpid()), 1))
	for i := 0; ; i++ {
		n := 1 + rng.IntN(50)
		batch := make([][]byte, n)
		for j := range batch {
			batch[j] = fmt.Appendf(nil, "p%d-%d-%d", os.Getpid(), i, j)
		}
		r, err := st.Append(context.Background(), batch)
		if err != nil {
			fmt.Fprintln(w, "append error:", err)
			w.Flush()
			os.Exit(3)
		}
		fmt.Fprintf(w, "ok %d %d %d %d\n", r.First, r.Last, i, os.Getpid())
		w.Flush()
	}
}

// TestCrashSync kills an appending child process at random points, over and
// over, and checks after each reopen that every append the child saw
// succeed is there, in order, with no duplicate or missing sequence numbers.
func TestCrashSync(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	dir := t.TempDir()
	want := map[uint64]string{}
	rng := rand.New(rand.NewPCG(7, 7))
	rounds := 8
	for round := 0; round < rounds; round++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "BUFFER_CRASH_CHILD="+dir)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string, 1024)
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		killAt := time.After(time.Duration(50+rng.IntN(400)) * time.Millisecond)
		seen := 0
	read:
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					break read
				}
				var first, last uint64
				var i, pid int
				if _, err := fmt.Sscanf(l, "ok %d %d %d %d", &first, &last, &i, &pid); err != nil {
					t.Fatalf("child: %s", l)
				}
				for q := first; q <= last; q++ {
					if _, dup := want[q]; dup {
						t.Fatalf("round %d: seq %d assigned twice", round, q)
					}
					want[q] = fmt.Sprintf("p%d-%d-%d", pid, i, q-first)
				}
				seen++
			case <-killAt:
				cmd.Process.Signal(syscall.SIGKILL)
				killAt = nil
			}
		}
		cmd.Wait()
		t.Logf("round %d: child acknowledged %d appends before SIGKILL", round, seen)
		verifyCrashDir(t, dir, want)
	}
}

func verifyCrashDir(t *testing.T, dir string, want map[uint64]string) {
	t.Helper()
	s, err := Open(dir, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatalf("reopen after kill: %v", err)
	}
	defer s.Close()
	st, err := s.Stream("crash", StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	next := uint64(1)
	for {
		recs, err := st.ReadFrom(next, 10000, 1<<30)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) == 0 {
			break
		}
		for _, r := range recs {
			if r.Seq != next {
				t.Fatalf("seq %d follows %d", r.Seq, next-1)
			}
			if w, ok := want[r.Seq]; ok && w != string(r.Data) {
				t.Fatalf("seq %d holds %q, child appended %q", r.Seq, r.Data, w)
			}
			next++
		}
	}
	for q := range want {
		if q >= next {
			t.Fatalf("acknowledged seq %d lost (store ends at %d)", q, next-1)
		}
	}
	// Appends the child made but never saw acknowledged may survive; adopt
	// them so the next round's checks see a consistent history.
	recs, _ := st.ReadFrom(1, 1<<30, 1<<30)
	for _, r := range recs {
		want[r.Seq] = string(r.Data)
	}
}

// TestTornTail writes a partial entry after the last one in Badger's
// memtable log, as power loss in the middle of a write leaves it, and
// checks the store opens with every synced append intact.
func TestTornTail(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir, Options{Durability: DurabilitySync})
	st, _ := s.Stream("d", StreamOptions{})
	for i := 0; i < 20; i++ {
		if _, err := st.Append(context.Background(), recs(i*10, 10)); err != nil {
			t.Fatal(err)
		}
	}
	// Simulate a crash: copy the directory while the store is open, so
	// nothing is closed cleanly, then tear the copy's newest memtable log.
	crashed := t.TempDir()
	copyDir(t, dir, crashed)
	mems, _ := filepath.Glob(filepath.Join(crashed, "*.mem"))
	if len(mems) == 0 {
		t.Fatal("no memtable log to tear")
	}
	tearAfterLastWrite(t, mems[len(mems)-1])
	os.Remove(filepath.Join(crashed, "LOCK"))
	s2, err := Open(crashed, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatalf("open after torn write: %v", err)
	}
	defer s2.Close()
	st2, _ := s2.Stream("d", StreamOptions{})
	got, _ := st2.ReadFrom(1, 1000, 1<<20)
	if len(got) != 200 {
		t.Fatalf("after torn write: %d records, want 200", len(got))
	}
}

func copyDir(t *testing.T, from, to string) {
	ents, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// tearAfterLastWrite writes half an entry's worth of noise just after the
// last non-zero byte of a preallocated log file.
func tearAfterLastWrite(t *testing.T, path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	end := len(b)
	for end > 0 && b[end-1] == 0 {
		end--
	}
	noise := []byte{0x81, 0x07, 0x33, 0xfe, 0x12, 0x99, 0x42, 0x05, 0x77, 0x01, 0xab}
	copy(b[end:], noise)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestCorruptDirectory checks that a damaged directory gives an error that
// names the path and what to do, and never panics.
func TestCorruptDirectory(t *testing.T) {
	for _, victim := range []string{"MANIFEST", "KEYREGISTRY"} {
		t.Run(victim, func(t *testing.T) {
			dir := t.TempDir()
			s := openTest(t, dir, Options{})
			st, _ := s.Stream("d", StreamOptions{})
			st.Append(context.Background(), recs(0, 10))
			s.Close()
			if err := os.WriteFile(filepath.Join(dir, victim), []byte("this is not badger data at all, not even close"), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := Open(dir, Options{Logger: quietLogger()})
			if err == nil {
				t.Fatal("opened a corrupt directory")
			}
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "move it aside") {
				t.Fatalf("unhelpful error: %v", err)
			}
		})
	}
	t.Run("locked", func(t *testing.T) {
		dir := t.TempDir()
		openTest(t, dir, Options{})
		if _, err := Open(dir, Options{Logger: quietLogger()}); !errors.Is(err, ErrLocked) {
			t.Fatalf("second open: want ErrLocked, got %v", err)
		}
	})
}

// TestCorruptBlockBecomesGap writes a damaged block and checks that reading
// skips it, reports it as a gap and goes on. The tail cache is off: it
// damages the block behind the open store's back, and a read the cache
// answers gets the block as it was written (TestTailCacheDifferential
// covers corrupt blocks with the cache on).
func TestCorruptBlockBecomesGap(t *testing.T) {
	s := openTest(t, t.TempDir(), Options{Durability: DurabilityNone, TailCacheBytes: -1})
	st, _ := s.Stream("d", StreamOptions{})
	ctx := context.Background()
	st.Append(ctx, recs(1, 5))
	st.Append(ctx, recs(6, 5))
	st.Append(ctx, recs(11, 5))
	// Overwrite the middle block (seqs 6..10) with a bad checksum.
	var key []byte
	wb := s.db.NewWriteBatch()
	v, _ := encodeBlock(6, recs(6, 5), 100, CompressNone, nil)
	v[len(v)-1] ^= 0xff
	key = blockKey(st.num, 10, 0, len(v))
	// Remove the original block key first: its append time differs.
	s.deleteBlocks(wb, st, 6, new(int64), func(b blockInfo) bool { return b.lastSeq == 10 })
	wb.Set(key, v)
	if err := wb.Flush(); err != nil {
		t.Fatal(err)
	}
	got, err := st.ReadFrom(1, 100, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 10 || got[4].Seq != 5 || got[5].Seq != 11 {
		t.Fatalf("read around a corrupt block: %d records", len(got))
	}
	if g := st.Gaps(); len(g) != 1 || g[0] != (Gap{6, 10, ReasonCorrupt}) {
		t.Fatalf("gaps: %v", g)
	}
	if stats := st.Stats(); stats.Head != 1 || stats.Dropped != 5 {
		t.Fatalf("a corrupt block in the middle moved the head: %+v", stats)
	}
	// A later drop at the front must not report the corrupt range twice.
	if err := s.submit(&op{kind: opExpire, st: st, cutoffMs: 1 << 62}); err != nil {
		t.Fatal(err)
	}
	g := st.Gaps()
	covered := map[uint64]int{}
	for _, r := range g {
		for q := r.First; q <= r.Last; q++ {
			covered[q]++
		}
	}
	for q := uint64(1); q <= 15; q++ {
		if covered[q] != 1 {
			t.Fatalf("seq %d in %d gaps: %v", q, covered[q], g)
		}
	}
}
