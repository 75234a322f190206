package aggregate

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// TestMaxLivePartials: with max_live_partials far below what a live fleet
// creates, final partials leave memory early, the final ones live stay
// within the cap, and every answer (late events reloading evicted
// partials included) equals an engine that kept everything live.
func TestMaxLivePartials(t *testing.T) {
	batches := liveFleet(rand.New(rand.NewPCG(11, 12)))
	opt := propOptions()
	opt.EvictAfter = 1000 * time.Hour
	ref, _ := runLive(t, opt, batches)
	rs := ref.Stats()
	if rs.Evicted != 0 || rs.LivePartials < 5000 || rs.Late == 0 {
		t.Fatalf("the reference engine should keep every partial live and see late events: %+v", rs)
	}

	// Far below what the fleet creates, above the partials of windows that
	// are not final (12 series, a few buckets each), so no event waits.
	opt.MaxLivePartials = 200
	opt.Store = NewMemStore()
	capped, peakFinal := runLive(t, opt, batches)
	s := capped.Stats()
	if s.HeldForPartials != 0 {
		t.Fatalf("%d events held for max_live_partials: the cap is below the partials that are not final", s.HeldForPartials)
	}
	t.Logf("%+v", s)
	if s.PressureEvicted == 0 || s.Reloaded == 0 {
		t.Fatalf("expected pressure evictions and late reloads: %+v", s)
	}
	// Only partials of final windows leave early: nothing but a late event
	// reloads one.
	if s.Reloaded > s.Late {
		t.Fatalf("%d reloads for %d late events: a partial that was not final left memory", s.Reloaded, s.Late)
	}
	// A pass runs when the watermark enters a new bucket, so the buckets it
	// finalises add at most one final partial per series before the next.
	if bound := opt.MaxLivePartials + s.Series; peakFinal > bound {
		t.Fatalf("final partials live peaked at %d, cap %d + %d series", peakFinal, opt.MaxLivePartials, s.Series)
	}
	if s.LivePartials > opt.MaxLivePartials {
		t.Fatalf("%d partials live after the run, cap %d", s.LivePartials, opt.MaxLivePartials)
	}
	if a, b := fullResults(t, ref), fullResults(t, capped); a != b {
		t.Fatal("answers differ under max_live_partials")
	}
	if s.Late != rs.Late || s.TooLate != rs.TooLate || s.Events != rs.Events {
		t.Fatalf("events %d/%d late %d/%d too late %d/%d: eviction changed what was counted",
			s.Events, rs.Events, s.Late, rs.Late, s.TooLate, rs.TooLate)
	}
}

// liveFleet is two hours of 12 devices sending a batch of five events
// every 10 s, stamped as they arrive, and now and then a late batch for a
// bucket 5 to 60 minutes old. Devices 0 – 2 have a second stream into the
// same series that runs 30 s behind and holds the watermark back, so
// buckets past the watermark still get events that are not late.
func liveFleet(r *rand.Rand) []*Batch {
	var out []*Batch
	seqs := make([]uint64, 15)
	rooms := []string{"kitchen", "hall"}
	for k := 0; k < 720; k++ {
		now := t0.Add(time.Duration(k+1) * 10 * time.Second)
		for d := range 12 {
			dev := fmt.Sprintf("dev-%d", d)
			tags := []Tag{{Key: "room", Value: rooms[d%2]}}
			b := &Batch{Device: dev, Stream: sid(d), ServerTime: now.UnixNano()}
			for j := 0; j < 5; j++ {
				seqs[d]++
				b.Events = append(b.Events, Event{Seq: seqs[d], Metric: "m", Tags: tags, Value: float64(r.IntN(200)) / 4,
					Time: now.Add(-10*time.Second + time.Duration(j)*2*time.Second).UnixNano()})
			}
			out = append(out, b)
			if d < 3 {
				seqs[12+d]++
				out = append(out, &Batch{Device: dev, Stream: sid(12 + d), ServerTime: now.UnixNano(), Events: []Event{
					{Seq: seqs[12+d], Metric: "m", Tags: tags, Value: float64(r.IntN(200)) / 4, Time: now.Add(-40 * time.Second).UnixNano()}}})
			}
			if k > 60 && r.IntN(20) == 0 {
				seqs[d]++
				back := 5*time.Minute + time.Duration(r.IntN(55*60))*time.Second
				out = append(out, &Batch{Device: dev, Stream: sid(d), ServerTime: now.UnixNano(), Events: []Event{
					{Seq: seqs[d], Metric: "m", Tags: tags, Value: float64(r.IntN(200)) / 4, Time: now.Add(-back).UnixNano()}}})
			}
		}
	}
	return out
}

// runLive applies batches with processing time at each batch's server
// time, then lets the watermark pass the end; it returns the engine and
// the most final partials that were live after any batch.
func runLive(t *testing.T, opt Options, batches []*Batch) (*Engine, int) {
	clk := &fakeClock{}
	opt.Clock = clk.Now
	e := newEngine(t, opt)
	peak := 0
	for _, b := range batches {
		clk.now = time.Unix(0, b.ServerTime)
		mustApply(t, e, b)
		peak = max(peak, finalLive(e))
	}
	clk.now = clk.now.Add(10 * time.Minute)
	e.Tick()
	return e, peak
}

// finalLive counts the live partials of buckets in final windows.
func finalLive(e *Engine) int {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if !e.clk.hasFinal {
		return 0
	}
	final := floorDiv(e.clk.final-int64(e.opt.AllowedLateness), e.res)
	n := 0
	for i := range e.series.list {
		k, _ := searchParts(e.series.list[i].parts, final)
		n += k
	}
	return n
}

// TestMaxLivePartialsValidated: the cap must be positive, named by its
// YAML key.
func TestMaxLivePartialsValidated(t *testing.T) {
	o := testOptions()
	o.EnsureDefaults()
	if o.MaxLivePartials != 4_000_000 {
		t.Fatalf("default max_live_partials %d", o.MaxLivePartials)
	}
	o.MaxLivePartials = -1
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "max_live_partials:") {
		t.Fatalf("got %v, want an error naming max_live_partials", err)
	}
}

// TestPressureEvictionWithinBatch: a batch of late events that fills the
// live partials would, under max_live_partials, evict a partial it already
// added to and then add to it again: the reloaded partial's replay guard
// (the batch's own position) would skip the rest of the batch's events
// for it. The partials the batch being applied has touched stay live
// until it ends, so every event counts once.
func TestPressureEvictionWithinBatch(t *testing.T) {
	var batches []*Batch
	seqs := make([]uint64, 4)
	// An hour of four devices sending one event per 10 s bucket.
	for k := 0; k < 360; k++ {
		now := t0.Add(time.Duration(k+1) * 10 * time.Second)
		for d := range seqs {
			seqs[d]++
			batches = append(batches, &Batch{Device: fmt.Sprintf("dev-%d", d), Stream: sid(d), ServerTime: now.UnixNano(), Events: []Event{
				{Seq: seqs[d], Metric: "m", Value: float64(k), Time: now.Add(-5 * time.Second).UnixNano()}}})
		}
	}
	// One late batch of dev-0: bucket X, then 30 other old buckets (the
	// live partials pass the cap and final ones are evicted, X the oldest
	// of them), then X again.
	end := t0.Add(361 * 10 * time.Second)
	late := &Batch{Device: "dev-0", Stream: sid(0), ServerTime: end.UnixNano()}
	x := t0.Add(20*time.Minute + 3*time.Second)
	add := func(at time.Time) {
		seqs[0]++
		late.Events = append(late.Events, Event{Seq: seqs[0], Metric: "m", Value: 1, Time: at.UnixNano()})
	}
	add(x)
	for i := 0; i < 30; i++ {
		add(t0.Add(25*time.Minute + time.Duration(i)*10*time.Second + time.Second))
	}
	add(x.Add(time.Second))
	batches = append(batches, late)
	for i, b := range batches {
		b.Seq = uint64(i + 1) // log positions: the engine's replay guard is on
	}

	opt := propOptions()
	opt.EvictAfter = 1000 * time.Hour
	ref, _ := runLive(t, opt, batches)
	opt.MaxLivePartials = 200
	opt.Store = NewMemStore()
	capped, _ := runLive(t, opt, batches)
	rs, s := ref.Stats(), capped.Stats()
	if s.PressureEvicted == 0 || s.Reloaded < 31 || s.HeldForPartials != 0 {
		t.Fatalf("the test should evict under pressure and reload without holding events: %+v", s)
	}
	if s.ReplaySkipped != 0 || s.Events != rs.Events {
		t.Fatalf("events %d, want %d; %d counted as replays", s.Events, rs.Events, s.ReplaySkipped)
	}
	if a, b := fullResults(t, ref), fullResults(t, capped); a != b {
		t.Fatal("answers differ under max_live_partials")
	}
}
