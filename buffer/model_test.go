package buffer

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// model is the simple truth a Stream must agree with: a map of held records
// and the positions, with drops only at the front.
type model struct {
	held        map[uint64]string
	head, next  uint64
	acked       uint64
	droppedSeqs map[uint64]bool
}

// TestAgainstModel runs random interleavings of append, read, ack and
// reopen, with a small bound so drop_oldest fires, and checks every read and
// every position against the model, and the oldest append time against a
// seek in Badger; with the tail cache and, for some seeds, without it.
// Short mode (the race run) runs a third of the seeds.
func TestAgainstModel(t *testing.T) {
	cached, uncached := uint64(8), uint64(12)
	if testing.Short() {
		cached, uncached = 3, 10
	}
	for seed := uint64(1); seed <= cached; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runModel(t, seed, 0) })
	}
	for seed := uint64(9); seed <= uncached; seed++ {
		t.Run(fmt.Sprint(seed, "_uncached"), func(t *testing.T) { runModel(t, seed, -1) })
	}
}

func runModel(t *testing.T, seed uint64, tailCache int64) {
	rng := rand.New(rand.NewPCG(seed, seed*7919))
	dir := t.TempDir()
	now := time.Unix(1_800_000_000, 0)
	opts := Options{Durability: DurabilityNone, MaxBlockBytes: 1 << 10, TailCacheBytes: tailCache, Now: func() time.Time { return now }}
	sopts := StreamOptions{MaxBytes: 8 << 10}
	s := openTest(t, dir, opts)
	st, err := s.Stream("m", sopts)
	if err != nil {
		t.Fatal(err)
	}
	m := model{held: map[uint64]string{}, head: 1, next: 1, droppedSeqs: map[uint64]bool{}}
	ctx := context.Background()
	for step := 0; step < 400; step++ {
		now = now.Add(time.Second) // each step's blocks have their own append time
		switch k := rng.IntN(10); {
		case k < 5:
			n := 1 + rng.IntN(40)
			batch := make([][]byte, n)
			for i := range batch {
				batch[i] = fmt.Appendf(nil, "s%d-%d-%s", seed, step, make([]byte, rng.IntN(60)))
			}
			r, err := st.Append(ctx, batch)
			if err != nil {
				t.Fatalf("step %d append: %v", step, err)
			}
			if r.First != m.next || r.Len() != uint64(n) {
				t.Fatalf("step %d: range %v, model next %d n %d", step, r, m.next, n)
			}
			for i, b := range batch {
				m.held[r.First+uint64(i)] = string(b)
			}
			m.next += uint64(n)
			// Drops happen at the front: sync the model from the stream's head.
			h := st.Stats().Head
			for q := m.head; q < h; q++ {
				if _, ok := m.held[q]; ok {
					delete(m.held, q)
					m.droppedSeqs[q] = true
				}
			}
			m.head = max(m.head, h)
		case k < 8:
			from := m.acked + uint64(rng.IntN(30))
			got, err := st.ReadFrom(from, 1+rng.IntN(50), 1+rng.IntN(4000))
			if err != nil {
				t.Fatalf("step %d read: %v", step, err)
			}
			want := max(from, m.head)
			for _, r := range got {
				if r.Seq != want {
					t.Fatalf("step %d: read seq %d, want %d", step, r.Seq, want)
				}
				if m.held[r.Seq] != string(r.Data) {
					t.Fatalf("step %d: seq %d data differs", step, r.Seq)
				}
				want++
			}
			if want < m.next && len(got) == 0 {
				t.Fatalf("step %d: read from %d returned nothing, next %d", step, from, m.next)
			}
		case k < 9:
			if m.next == 1 {
				continue
			}
			upTo := m.acked + uint64(rng.IntN(int(m.next-m.acked)))
			if err := st.Ack(upTo); err != nil {
				t.Fatalf("step %d ack %d: %v", step, upTo, err)
			}
			for q := m.head; q <= upTo; q++ {
				delete(m.held, q)
			}
			m.acked = max(m.acked, upTo)
			m.head = max(m.head, upTo+1)
		default:
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = openTest(t, dir, opts)
			if st, err = s.Stream("m", sopts); err != nil {
				t.Fatal(err)
			}
		}
		stats := st.Stats()
		if stats.Head != m.head || stats.Next != m.next || stats.Acked != m.acked {
			t.Fatalf("step %d: stats %+v, model head %d next %d acked %d", step, stats, m.head, m.next, m.acked)
		}
		wantOldest := int64(0)
		if stats.Next > stats.Head {
			wantOldest = st.oldestMs(stats.Head)
		}
		if stats.OldestMs != wantOldest {
			t.Fatalf("step %d: oldest %d, the block at head %d was appended at %d", step, stats.OldestMs, stats.Head, wantOldest)
		}
		// Badger holds exactly the blocks from the head on, and the bytes
		// count them: a delete that missed a block (or deleted one twice)
		// shows here, whichever way it found the keys.
		var held int64
		for _, k := range blockKeysFrom(t, s, st, 0) {
			b, _ := parseBlockKey(k)
			if b.lastSeq < stats.Head {
				t.Fatalf("step %d: block ending at %d is still in Badger below the head %d", step, b.lastSeq, stats.Head)
			}
			held += b.size
		}
		if held != stats.Bytes {
			t.Fatalf("step %d: stats count %d bytes, Badger holds blocks of %d", step, stats.Bytes, held)
		}
		if stats.Bytes > sopts.MaxBytes {
			t.Fatalf("step %d: %d bytes over bound %d", step, stats.Bytes, sopts.MaxBytes)
		}
		// Every dropped seq above the ack is covered by exactly one gap.
		for q := range m.droppedSeqs {
			if q <= m.acked {
				delete(m.droppedSeqs, q)
				continue
			}
			n := 0
			for _, g := range st.Gaps() {
				if q >= g.First && q <= g.Last {
					n++
				}
			}
			if n != 1 {
				t.Fatalf("step %d: dropped seq %d in %d gaps %v", step, q, n, st.Gaps())
			}
		}
	}
}
