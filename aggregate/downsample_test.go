package aggregate

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// dsHours is how much event time genHours covers.
const dsHours = 6 * time.Hour

// genHours generates six hours of events of four devices (one stream
// each, in order), values multiples of 1/8 so that sums are exact in any
// order, with occasional ten-minute breaks for sessions.
func genHours(r *rand.Rand) []*Batch {
	rooms := []string{"kitchen", "hall"}
	var out []*Batch
	for dev := 0; dev < 4; dev++ {
		var seq uint64
		tm := time.Duration(r.IntN(30)) * time.Second
		var b *Batch
		for tm < dsHours {
			if b == nil || len(b.Events) == 50 {
				b = &Batch{Device: fmt.Sprintf("dev-%d", dev), Stream: sid(dev), ServerTime: at(tm)}
				out = append(out, b)
			}
			seq++
			b.Events = append(b.Events, Event{Seq: seq, Metric: "m", Tags: []Tag{{"room", rooms[r.IntN(2)]}},
				Value: float64(r.IntN(801)-400) / 8, Time: at(tm)})
			tm += time.Duration(5+r.IntN(20)) * time.Second
			if r.IntN(200) == 0 {
				tm += 10 * time.Minute
			}
		}
	}
	slices.SortStableFunc(out, func(a, b *Batch) int { return cmp.Compare(a.ServerTime, b.ServerTime) })
	for i, b := range out {
		b.Seq = uint64(i + 1)
	}
	return out
}

// dsOptions downsample to 1m after 2h and to 5m after 4h (late_horizon is
// 30m, evict_after 1m).
func dsOptions() Options {
	o := testOptions()
	o.TagKeys = []string{"room"}
	o.LateHorizon = 30 * time.Minute
	o.EvictAfter = time.Minute
	o.Downsample = []DownsampleTier{{After: 2 * time.Hour, Resolution: time.Minute}, {After: 4 * time.Hour, Resolution: 5 * time.Minute}}
	return o
}

// dsEngine applies the batches, then moves processing time to the end of
// the data plus extra and ticks until maintenance has nothing left to do.
// With a budget of n per pass that takes many passes.
func dsEngine(t testing.TB, opt Options, batches []*Batch, extra time.Duration, budget int) *Engine {
	t.Helper()
	clk := &fakeClock{now: t0}
	opt.Clock = clk.Now
	e := newEngine(t, opt)
	if budget > 0 {
		e.maint.budget = budget
	}
	for _, b := range batches {
		mustApply(t, e, b)
	}
	clk.now = t0.Add(dsHours + extra)
	settle(e)
	return e
}

// settle ticks until maintenance has caught up.
func settle(e *Engine) {
	for i := 0; i < 100_000; i++ {
		e.Tick()
		if !e.maint.more {
			return
		}
	}
}

// dsQueries are windows that are multiples of the 5m tier, over all data.
func dsQueries() []Query {
	specs := []WindowSpec{
		{Kind: Tumbling, Size: 5 * time.Minute},
		{Kind: Tumbling, Size: time.Hour},
		{Kind: Hopping, Size: 15 * time.Minute, Slide: 5 * time.Minute},
		{Kind: Session, Gap: 5 * time.Minute},
	}
	var qs []Query
	for _, s := range specs {
		for _, g := range [][]string{nil, {"device"}, {"room"}} {
			qs = append(qs, Query{Metric: "m", Window: s, GroupBy: g, From: t0.Add(-time.Hour), To: t0.Add(dsHours + time.Hour)})
		}
	}
	return qs
}

// sameAnswers compares every query of qs on two engines exactly.
func sameAnswers(t *testing.T, want, got *Engine, qs []Query) {
	t.Helper()
	for _, q := range qs {
		a, b := mustQuery(t, want, q), mustQuery(t, got, q)
		if len(a) == 0 {
			t.Fatalf("%v group_by %v: no windows", q.Window, q.GroupBy)
		}
		if d := diffResults(a, b); d != "" {
			t.Fatalf("%v group_by %v: %s", q.Window, q.GroupBy, d)
		}
	}
}

func TestDownsampleOptions(t *testing.T) {
	tier := func(after, res time.Duration) DownsampleTier { return DownsampleTier{After: after, Resolution: res} }
	tests := []struct {
		name  string
		tiers []DownsampleTier
		ret   time.Duration
		field string // "" for valid
	}{
		{"off", nil, 0, ""},
		{"two tiers and retention", []DownsampleTier{tier(168*time.Hour, 5*time.Minute), tier(720*time.Hour, time.Hour)}, 8760 * time.Hour, ""},
		{"retention only", nil, 100 * time.Hour, ""},
		{"resolution not a multiple", []DownsampleTier{tier(168*time.Hour, 15*time.Second)}, 0, "downsample[0].resolution"},
		{"resolution not a multiple of the previous tier", []DownsampleTier{tier(168*time.Hour, 5*time.Minute), tier(720*time.Hour, 7*time.Minute)}, 0, "downsample[1].resolution"},
		{"resolution not coarser", []DownsampleTier{tier(168*time.Hour, 5*time.Minute), tier(720*time.Hour, 5*time.Minute)}, 0, "downsample[1].resolution"},
		{"after too young", []DownsampleTier{tier(72*time.Hour, 5*time.Minute)}, 0, "downsample[0].after"},
		{"after not increasing", []DownsampleTier{tier(168*time.Hour, 5*time.Minute), tier(168*time.Hour, time.Hour)}, 0, "downsample[1].after"},
		{"retention before the last tier", []DownsampleTier{tier(168*time.Hour, 5*time.Minute)}, 100 * time.Hour, "partials_retention"},
		{"retention too young", nil, time.Hour, "partials_retention"},
		{"negative retention", nil, -time.Hour, "partials_retention"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := Options{Downsample: tt.tiers, PartialsRetention: tt.ret}
			o.EnsureDefaults()
			err := o.Validate()
			if tt.field == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), tt.field+":") {
				t.Fatalf("got %v, want an error naming %s", err, tt.field)
			}
		})
	}
}

// TestDownsampleKeepsAnswers: windows that are multiples of the coarsest
// resolution answer exactly as an engine that never downsampled, however
// the passes are cut up (budget) and whatever queries ran before (cache),
// and the store holds fewer partials.
func TestDownsampleKeepsAnswers(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		for _, budget := range []int{0, 37} {
			t.Run(fmt.Sprintf("seed=%d/budget=%d", seed, budget), func(t *testing.T) {
				r := rand.New(rand.NewPCG(seed, 9))
				batches := genHours(r)
				ref := dsOptions()
				ref.Downsample = nil
				want := dsEngine(t, ref, batches, 0, 0)

				opt := dsOptions()
				store := NewMemStore()
				opt.Store = durableStore{store}
				clk := &fakeClock{now: t0}
				opt.Clock = clk.Now
				got := newEngine(t, opt)
				if budget > 0 {
					got.maint.budget = budget
				}
				for _, b := range batches {
					mustApply(t, got, b)
				}
				clk.now = t0.Add(dsHours)
				got.maint.ran, got.maint.last = true, clk.now.UnixNano() // hold maintenance off: fill the cache first
				got.Tick()
				sameAnswers(t, want, got, dsQueries())
				before := store.Len()
				got.maint.ran = false
				settle(got)
				sameAnswers(t, want, got, dsQueries())
				s := got.Stats()
				if s.Downsampled == 0 || store.TierLen(1) == 0 || store.TierLen(2) == 0 {
					t.Fatalf("nothing downsampled: %+v, tiers %d %d", s, store.TierLen(1), store.TierLen(2))
				}
				if after := store.Len(); after >= before*2/3 {
					t.Fatalf("store holds %d partials, %d before; downsampled %d into %d+%d", after, before, s.Downsampled, store.TierLen(1), store.TierLen(2))
				}
				// Recent data keeps its base resolution.
				q := Query{Metric: "m", Window: WindowSpec{Kind: Tumbling, Size: 10 * time.Second}, From: t0.Add(5 * time.Hour), To: t0.Add(dsHours)}
				if d := diffResults(mustQuery(t, want, q), mustQuery(t, got, q)); d != "" {
					t.Fatalf("recent 10s windows: %s", d)
				}
			})
		}
	}
}

// TestDownsampleFinerWindows: a window finer than the resolution kept in
// its range is a ParamError on window that names the resolution and says
// what to do; partial sets refuse downsampled ranges.
func TestDownsampleFinerWindows(t *testing.T) {
	e := dsEngine(t, dsOptions(), genHours(rand.New(rand.NewPCG(3, 4))), 0, 0)
	tests := []struct {
		spec WindowSpec
		from time.Duration
		want string // in the reason; "" when the query is fine
	}{
		{WindowSpec{Kind: Tumbling, Size: time.Minute}, 0, "5m0s resolution kept for data older than 4h0m0s"},
		{WindowSpec{Kind: Tumbling, Size: time.Minute}, 3 * time.Hour, ""},
		{WindowSpec{Kind: Tumbling, Size: 30 * time.Second}, 3 * time.Hour, "1m0s resolution kept for data older than 2h0m0s"},
		{WindowSpec{Kind: Hopping, Size: 10 * time.Minute, Slide: time.Minute}, 0, "multiples of 5m0s"},
		{WindowSpec{Kind: Sliding, Size: 5 * time.Minute}, 0, "or a from at or after"},
		{WindowSpec{Kind: Session, Gap: time.Minute}, 0, "session gap"},
		{WindowSpec{Kind: Session, Gap: 5 * time.Minute}, 0, ""},
		{WindowSpec{Kind: Tumbling, Size: 10 * time.Second}, 5 * time.Hour, ""},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.spec, "@", tt.from), func(t *testing.T) {
			_, err := e.Query(Query{Metric: "m", Window: tt.spec, From: t0.Add(tt.from), To: t0.Add(dsHours)})
			var pe *ParamError
			switch {
			case tt.want == "" && err != nil:
				t.Fatal(err)
			case tt.want != "" && (!errors.As(err, &pe) || pe.Param != "window" || !strings.Contains(pe.Reason, tt.want)):
				t.Fatalf("got %v, want a window error with %q", err, tt.want)
			}
		})
	}
	_, err := e.ExportPartials(Query{Metric: "m", From: t0, To: t0.Add(dsHours)})
	var pe *ParamError
	if !errors.As(err, &pe) || pe.Param != "from" || !strings.Contains(pe.Reason, "downsampled") {
		t.Fatalf("export of downsampled range: %v", err)
	}
	if _, err := e.ExportPartials(Query{Metric: "m", From: t0.Add(5 * time.Hour), To: t0.Add(dsHours)}); err != nil {
		t.Fatalf("export of recent range: %v", err)
	}
}

// TestPartialsRetention: partials older than partials_retention leave
// every tier; younger windows answer as before.
func TestPartialsRetention(t *testing.T) {
	batches := genHours(rand.New(rand.NewPCG(5, 6)))
	ref := dsOptions()
	ref.Downsample = nil
	want := dsEngine(t, ref, batches, 3*time.Hour, 0)
	opt := dsOptions()
	opt.PartialsRetention = 5 * time.Hour
	store := NewMemStore()
	opt.Store = store
	got := dsEngine(t, opt, batches, 3*time.Hour, 50)
	s := got.Stats()
	if s.RetentionDeleted == 0 || s.Downsampled == 0 {
		t.Fatalf("nothing deleted: %+v", s)
	}
	metrics := map[string]float64{}
	for _, m := range (&collector{e: got}).values() {
		metrics[m.name] = m.v
	}
	if metrics["downsampled_partials_total"] != float64(s.Downsampled) || metrics["retention_deleted_partials_total"] != float64(s.RetentionDeleted) {
		t.Fatalf("metrics %v, stats %+v", metrics, s)
	}
	// The watermark is about 9h: retention keeps [4h, ...), in 5m partials.
	cut := ts(got.retentionCut() * got.res)
	if cut.Before(t0.Add(3*time.Hour)) || cut.After(t0.Add(4*time.Hour)) {
		t.Fatalf("retention cut %v", cut)
	}
	q := Query{Metric: "m", Window: WindowSpec{Kind: Tumbling, Size: 5 * time.Minute}, From: t0, To: t0.Add(dsHours)}
	all, kept := mustQuery(t, want, q), mustQuery(t, got, q)
	for _, w := range kept {
		if w.Start.Before(cut) {
			t.Fatalf("window %v survived retention (cut %v)", w.Start, cut)
		}
	}
	var young []WindowResult
	for _, w := range all {
		if !w.Start.Before(cut) {
			young = append(young, w)
		}
	}
	if d := diffResults(young, kept); d != "" || len(kept) == 0 {
		t.Fatalf("windows after the cut: %s", d)
	}
	if n := store.Len(); uint64(n) >= s.Evicted-s.RetentionDeleted {
		t.Fatalf("store holds %d of %d evicted partials", n, s.Evicted)
	}
}

// failingStore is a durable store whose Replace and DeleteRange fail for
// a while, as a store that crashes mid-pass would: a failed Replace
// changed nothing (it is one transaction).
type failingStore struct {
	durableStore
	fails *int // calls left to fail
}

func (f failingStore) Replace(s uint32, from uint8, lo, hi int64, to uint8, puts []StoredPartial) error {
	if *f.fails > 0 {
		*f.fails--
		return errors.New("crash")
	}
	return f.durableStore.Replace(s, from, lo, hi, to, puts)
}

func (f failingStore) DeleteRange(t uint8, s uint32, from, to int64) (int, error) {
	if *f.fails > 0 {
		*f.fails--
		// Deleting is not atomic: half of the range went.
		n, _ := f.durableStore.DeleteRange(t, s, from, max(from, to-int64(time.Hour/(10*time.Second))))
		return n, errors.New("crash")
	}
	return f.durableStore.DeleteRange(t, s, from, to)
}

// TestDownsampleCrash: a pass that fails half way (and a restart from the
// last snapshot on the same durable store) loses and double counts
// nothing, and the work is finished by later passes.
func TestDownsampleCrash(t *testing.T) {
	batches := genHours(rand.New(rand.NewPCG(7, 8)))
	ref := dsOptions()
	ref.Downsample = nil
	want := dsEngine(t, ref, batches, 0, 0)

	opt := dsOptions()
	mem := NewMemStore()
	fails := 3
	opt.Store = failingStore{durableStore{mem}, &fails}
	clk := &fakeClock{now: t0}
	opt.Clock = clk.Now
	e := newEngine(t, opt)
	e.maint.budget = 40
	for _, b := range batches {
		mustApply(t, e, b)
	}
	clk.now = t0.Add(dsHours)
	e.Tick() // evicts everything and starts downsampling, failing
	snap, err := e.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if s := e.Stats(); s.StoreErrors == 0 {
		t.Fatalf("no failure injected: %+v", s)
	}
	sameAnswers(t, want, e, dsQueries())
	for i := 0; i < 5; i++ { // a few passes, then "crash"
		e.maint.more = true
		e.Tick()
	}
	sameAnswers(t, want, e, dsQueries())

	e2 := newEngine(t, opt) // restart on the same store
	e2.maint.budget = 40
	if err := e2.Restore(snap); err != nil {
		t.Fatal(err)
	}
	settle(e2)
	sameAnswers(t, want, e2, dsQueries())
	if mem.TierLen(0) >= mem.TierLen(1)*5 {
		t.Fatalf("downsampling did not finish: tiers %d %d %d", mem.TierLen(0), mem.TierLen(1), mem.TierLen(2))
	}
}

// TestRetentionCrash: a retention pass that fails half way deletes only
// whole old partials, and a later pass finishes.
func TestRetentionCrash(t *testing.T) {
	batches := genHours(rand.New(rand.NewPCG(9, 10)))
	opt := dsOptions()
	opt.Downsample = nil
	opt.PartialsRetention = 3 * time.Hour
	mem := NewMemStore()
	fails := 2
	opt.Store = failingStore{durableStore{mem}, &fails}
	e := dsEngine(t, opt, batches, 0, 0)
	if s := e.Stats(); s.StoreErrors == 0 {
		t.Fatalf("no failure injected: %+v", s)
	}
	for i := 0; i < 3; i++ { // failed passes wait for the next interval
		e.maint.more = true
		settle(e)
	}
	ref := opt
	ref.PartialsRetention, ref.Store = 0, nil
	want := dsEngine(t, ref, batches, 0, 0)
	cut := ts(e.retentionCut() * e.res)
	q := Query{Metric: "m", Window: WindowSpec{Kind: Tumbling, Size: time.Minute}, From: cut, To: t0.Add(dsHours)}
	if d := diffResults(mustQuery(t, want, q), mustQuery(t, e, q)); d != "" {
		t.Fatal(d)
	}
	old := mustQuery(t, e, Query{Metric: "m", Window: WindowSpec{Kind: Tumbling, Size: 10 * time.Second}, From: t0.Add(-time.Hour), To: cut})
	if len(old) != 0 {
		t.Fatalf("%d windows before the retention cut %v", len(old), cut)
	}
}

// TestLateIntoDownsampledBucket: an event whose bucket is downsampled
// (impossible with valid options: it is older than late_horizon) goes to
// the late log and changes no answer; a replayed one is skipped.
func TestLateIntoDownsampledBucket(t *testing.T) {
	batches := genHours(rand.New(rand.NewPCG(11, 12)))
	e := dsEngine(t, dsOptions(), batches, 0, 0)
	e.opt.LateHorizon = 1000 * time.Hour // what validation forbids
	before := e.Stats()
	q := dsQueries()
	want := make([][]WindowResult, len(q))
	for i := range q {
		want[i] = mustQuery(t, e, q[i])
	}
	late := batchOf("dev-0", 0, at(dsHours), ev{seq: 1 << 40, metric: "m", tags: []Tag{{"room", "hall"}}, v: 1000, t: at(30 * time.Minute)})
	late.Seq = uint64(len(batches) + 1)
	mustApply(t, e, late)
	var replayed Batch // the last batch wholly in downsampled buckets: every event skipped as a replay
	for _, b := range batches {
		if b.Events[len(b.Events)-1].Time < at(90*time.Minute) {
			replayed = *b
		}
	}
	mustApply(t, e, &replayed)
	s := e.Stats()
	if s.TooLate != before.TooLate+1 || s.ReplaySkipped != before.ReplaySkipped+uint64(len(replayed.Events)) {
		t.Fatalf("too late %d -> %d, replay skipped %d -> %d (batch of %d)", before.TooLate, s.TooLate,
			before.ReplaySkipped, s.ReplaySkipped, len(replayed.Events))
	}
	for i := range q {
		if d := diffResults(want[i], mustQuery(t, e, q[i])); d != "" {
			t.Fatalf("%v: %s", q[i].Window, d)
		}
	}
}

// TestDownsampleSnapshot: a MemStore's tiers travel in the snapshot.
func TestDownsampleSnapshot(t *testing.T) {
	batches := genHours(rand.New(rand.NewPCG(13, 14)))
	e := dsEngine(t, dsOptions(), batches, 0, 0)
	snap, err := e.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	opt := dsOptions()
	opt.Clock = e.opt.Clock
	e2 := newEngine(t, opt)
	if err := e2.Restore(snap); err != nil {
		t.Fatal(err)
	}
	if n := e2.opt.Store.(*MemStore).TierLen(2); n == 0 {
		t.Fatal("restored store has no tier 2 partials")
	}
	sameAnswers(t, e, e2, dsQueries())
	snap2, _ := e2.Snapshot()
	if string(snap) != string(snap2) {
		t.Fatal("snapshot of the restored engine differs")
	}
}
