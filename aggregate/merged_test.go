package aggregate

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// refStream is the merged stream done the obvious way: pending events in
// one slice, sorted on every release. The real one must release exactly
// the same events in exactly the same order.
type refStream struct {
	pending     []pendingEvent
	released    int64
	hasReleased bool
	out         []pendingEvent
	forced      uint64
	maxPending  int
}

func cmpPendingRef(a, b pendingEvent) int {
	return cmp.Or(cmp.Compare(a.t, b.t), cmp.Compare(a.stream, b.stream), cmp.Compare(a.seq, b.seq))
}

func (m *refStream) add(pe pendingEvent) {
	if m.hasReleased && pe.t < m.released {
		pe.late = true
		m.out = append(m.out, pe)
		return
	}
	m.pending = append(m.pending, pe)
	if len(m.pending) > m.maxPending {
		slices.SortFunc(m.pending, cmpPendingRef)
		half := len(m.pending) / 2
		cut := m.pending[half].t
		n := half
		for n > 0 && m.pending[n-1].t == cut {
			n--
		}
		if n == 0 {
			n = half
		}
		m.forced += uint64(n)
		through := m.pending[n-1].t + 1
		m.out = append(m.out, m.pending[:n]...)
		m.pending = slices.Delete(m.pending, 0, n)
		if !m.hasReleased || through > m.released {
			m.released, m.hasReleased = through, true
		}
	}
}

func (m *refStream) release(wm int64) {
	var ready, rest []pendingEvent
	for _, pe := range m.pending {
		if pe.t < wm {
			ready = append(ready, pe)
		} else {
			rest = append(rest, pe)
		}
	}
	slices.SortFunc(ready, cmpPendingRef)
	m.out = append(m.out, ready...)
	m.pending = rest
	if !m.hasReleased || wm > m.released {
		m.released, m.hasReleased = wm, true
	}
}

// TestMergedReleaseOrderMatchesSort drives the merged stream and a
// brute-force sorting model with the same random events (streams in
// order, jittered, jumping back, with equal times) and releases (watermark
// steps, forced releases of a small max_pending, a snapshot round trip,
// rings smaller than one release), and checks they release the same
// events in the same order.
func TestMergedReleaseOrderMatchesSort(t *testing.T) {
	for trial := 0; trial < 100; trial++ {
		r := rand.New(rand.NewPCG(uint64(trial), 99))
		t.Run(fmt.Sprint("trial=", trial), func(t *testing.T) { checkMergedAgainstSort(t, r) })
	}
}

func checkMergedAgainstSort(t *testing.T, r *rand.Rand) {
	opt := testOptions()
	opt.MaxPending = 20 + r.IntN(400)
	opt.StreamBuffer = 4096 // holds every event of a trial
	if r.IntN(2) == 0 {
		opt.StreamBuffer = 8 + r.IntN(64) // releases overrun the ring
	}
	opt.LateLogSize = 1
	e := newEngine(t, opt)
	m := &e.merged
	ref := &refStream{maxPending: opt.MaxPending}
	nStreams := 1 + r.IntN(12)
	clocks := make([]int64, nStreams)
	seqs := make([]uint64, nStreams)
	for i := range clocks {
		clocks[i] = int64(r.IntN(50))
	}
	wm := int64(0)
	for step := 0; step < 3000; step++ {
		switch op := r.IntN(100); {
		case op < 85:
			s := r.IntN(nStreams)
			seqs[s]++
			clocks[s] += int64(r.IntN(4)) // equal times are common
			tm := clocks[s]
			switch j := r.IntN(20); {
			case j == 0:
				tm -= int64(r.IntN(200)) // far back: a new run
			case j < 5:
				tm -= int64(r.IntN(6)) // jitter: insertion
			}
			pe := pendingEvent{t: tm, seq: seqs[s], value: float64(step), series: uint32(r.IntN(3)), stream: uint32(s)}
			ev := Event{Seq: pe.seq, Value: pe.value, Time: pe.t}
			m.add(e, &ev, pe.series, pe.stream)
			ref.add(pe)
		case op < 99:
			wm += int64(r.IntN(30))
			m.release(e, wm)
			ref.release(wm)
		default:
			snap := encoder{}
			e.encodeMerged(&snap)
			restored := newEngine(t, opt)
			restored.streams, restored.series.list = make([]stream, nStreams), make([]series, 3)
			d := decoder{b: snap.b}
			restored.decodeMerged(&d)
			if d.err != nil {
				t.Fatal(d.err)
			}
			again := encoder{}
			restored.encodeMerged(&again)
			if string(again.b) != string(snap.b) {
				t.Fatalf("step %d: snapshot of a restored merged stream differs", step)
			}
			restored.stats.forced = e.stats.forced
			e = restored
			m = &e.merged
		}
		if m.count != len(ref.pending) {
			t.Fatalf("step %d: %d pending, model %d", step, m.count, len(ref.pending))
		}
	}
	got := m.out.all()
	if len(got) != min(len(ref.out), opt.StreamBuffer) || m.out.next != uint64(len(ref.out)) {
		t.Fatalf("holds %d events (next %d), model released %d into a ring of %d", len(got), m.out.next, len(ref.out), opt.StreamBuffer)
	}
	want := ref.out[len(ref.out)-len(got):]
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("event %d of the ring: got %+v, model %+v", i, got[i], want[i])
		}
	}
	if m.released != ref.released || m.hasReleased != ref.hasReleased || e.stats.forced != ref.forced {
		t.Fatalf("released through %d/%v forced %d, model %d/%v forced %d",
			m.released, m.hasReleased, e.stats.forced, ref.released, ref.hasReleased, ref.forced)
	}
}

// TestMergeRunsOrder checks the loser tree against a sort for random
// sorted runs of every count from 0 to 40, with many equal keys.
func TestMergeRunsOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	var tree []mergeNode
	for k := 0; k <= 40; k++ {
		var srcs [][]pendingEvent
		var all []pendingEvent
		for i := 0; i < k; i++ {
			run := make([]pendingEvent, r.IntN(30))
			for j := range run {
				run[j] = pendingEvent{t: int64(r.IntN(20)), stream: uint32(r.IntN(5)), seq: uint64(i*1000 + j)}
			}
			slices.SortFunc(run, cmpPendingRef)
			srcs = append(srcs, run)
			all = append(all, run...)
		}
		slices.SortFunc(all, cmpPendingRef)
		got := mergeRuns(srcs, &tree, nil, 0, nil)
		if !slices.Equal(got, all) {
			t.Fatalf("k=%d: merge order differs from a sort", k)
		}
	}
}
