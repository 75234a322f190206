package rules

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"edgeflow/aggregate"
)

// TestThresholdMatchesBruteForce feeds a real engine shuffled batches
// (so most events are late, many after their window was final) and the
// evaluator the engine's updates; the firing alerts must be exactly the
// windows whose average crosses over the events sorted by time.
func TestThresholdMatchesBruteForce(t *testing.T) {
	resolved, revised := 0, 0
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 34))
		devs := []string{"d0", "d1", "d2"}
		var evs []tev
		for i := range 150 {
			evs = append(evs, tev{dev: devs[r.IntN(len(devs))], metric: "temp", v: float64(r.IntN(100)), t: at(time.Duration(r.IntN(120_000)) * time.Millisecond)})
			_ = i
		}
		rs := mustRules(t, `
rules:
  - {name: hot, metric: temp, window: "tumbling:10s", agg: avg, op: ">", value: 50, group_by: [device]}
  - {name: hot2, metric: temp, window: "tumbling:10s", agg: max, op: ">=", value: 90, group_by: [device], for: 2}
  - {name: busy, metric: temp, window: "hopping:20s/10s", agg: count, op: ">", value: 8}
`)
		clk := &fakeClock{now: t0.Add(time.Hour)}
		eng, err := aggregate.New(aggregate.Options{Resolution: time.Second, AllowedLateness: 2 * time.Second,
			WatermarkInterval: time.Nanosecond, Clock: clk.Now, LateHorizon: 24 * time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		sub := eng.Subscribe(1 << 16)
		ev := newEval(t, rs, Options{AllowedLateness: 2 * time.Second, Clock: clk.Now})
		seq := map[string]uint64{}
		apply := func(b *aggregate.Batch) {
			ev.ObserveBatch(b)
			if err := eng.Apply(b); err != nil {
				t.Fatal(err)
			}
			var ups []aggregate.Update
			for len(sub.Updates()) > 0 {
				ups = append(ups, <-sub.Updates())
			}
			if err := ev.Feed(eng, ups); err != nil {
				t.Fatal(err)
			}
		}
		for _, b := range deliveries(r, evs, 0) {
			apply(batchOf(b, seq, clk.now.UnixNano()))
		}
		// Every stream moves past the last window: all windows final.
		for _, d := range devs {
			apply(batchOf([]tev{{dev: d, metric: "pace", t: at(10 * time.Minute)}}, seq, clk.now.UnixNano()))
		}
		checkFiring(t, ev, bruteThreshold(rs, evs), true)
		resolved += len(alertSet(t, ev, Resolved))
		for _, a := range alertSet(t, ev, Firing) {
			if a.Revision > 1 {
				revised++
			}
		}
	}
	// The shuffles must have exercised late corrections.
	if resolved == 0 || revised == 0 {
		t.Fatalf("%d resolved and %d revised alerts over all seeds; the test no longer exercises late data", resolved, revised)
	}
	t.Logf("%d resolved, %d firing alerts revised by late data", resolved, revised)
}

// bruteThreshold evaluates the threshold rules over the sorted events.
func bruteThreshold(rs []Rule, evs []tev) map[string]Alert {
	want := map[string]Alert{}
	for i := range rs {
		rule := &rs[i]
		size, slide := int64(rule.Window.Size), int64(rule.Window.Slide)
		type key struct {
			g     string
			start int64
		}
		vals := map[key][]float64{}
		for _, e := range evs {
			g := ""
			if len(rule.GroupBy) > 0 {
				g = "device=" + e.dev
			}
			for s := floorDiv(e.t, slide) * slide; s > e.t-size; s -= slide {
				vals[key{g, s}] = append(vals[key{g, s}], e.v)
			}
		}
		cross := map[key]float64{}
		for k, vs := range vals {
			v := 0.0
			switch rule.Agg {
			case "avg":
				for _, x := range vs {
					v += x
				}
				v /= float64(len(vs))
			case "max":
				v = slices.Max(vs)
			case "count":
				v = float64(len(vs))
			}
			if rule.Op.Compare(v, rule.Value) {
				cross[k] = v
			}
		}
		for k, v := range cross {
			ok := true
			for j := 1; j < rule.For; j++ {
				if _, c := cross[key{k.g, k.start - int64(j)*slide}]; !c {
					ok = false
				}
			}
			if ok {
				id := alertID(rule.Name, k.g, k.start)
				want[id] = Alert{ID: id, Value: v, End: time.Unix(0, k.start+size).UTC()}
			}
		}
	}
	return want
}

// TestAbsenceMatchesBruteForce: silences found incrementally over
// shuffled, duplicated batches under a moving watermark equal the gaps of
// the sorted events.
func TestAbsenceMatchesBruteForce(t *testing.T) {
	rs := mustRules(t, `
rules:
  - {name: quiet, kind: absence, metric: temp, after: 30s}
  - {name: silent, kind: absence, after: 45s, group_by: []}
`)
	for seed := range uint64(50) {
		r := rand.New(rand.NewPCG(seed, 7))
		var evs []tev
		for range 60 {
			m := "temp"
			if r.IntN(3) == 0 {
				m = "door"
			}
			// Bursts with holes: times cluster so that some gaps exceed After.
			evs = append(evs, tev{dev: []string{"a", "b"}[r.IntN(2)], metric: m, t: at(time.Duration(r.IntN(40)) * 7 * time.Second)})
		}
		ev := newEval(t, rs, Options{})
		seq := map[string]uint64{}
		wm := int64(0)
		for _, b := range deliveries(r, evs, 0.3) {
			ev.ObserveBatch(batchOf(b, seq, 0))
			// The watermark moves with the batches, as the hub's does.
			wm = max(wm, b[0].t-int64(r.IntN(60))*int64(time.Second))
			ev.Watermark(time.Unix(0, wm))
		}
		ev.Watermark(time.Unix(0, at(time.Hour)))
		checkFiring(t, ev, bruteAbsence(rs, evs, at(time.Hour)), true)
	}
}

func bruteAbsence(rs []Rule, evs []tev, wm int64) map[string]Alert {
	want := map[string]Alert{}
	for i := range rs {
		rule := &rs[i]
		times := map[string][]int64{}
		for _, e := range evs {
			if rule.Metric != "" && e.metric != rule.Metric {
				continue
			}
			g := ""
			if len(rule.GroupBy) > 0 {
				g = "device=" + e.dev
			}
			times[g] = append(times[g], e.t)
		}
		for g, ts := range times {
			slices.Sort(ts)
			ts = slices.Compact(ts)
			for k, x := range ts {
				id := alertID(rule.Name, g, x)
				if k+1 < len(ts) {
					if ts[k+1]-x > int64(rule.After) {
						want[id] = Alert{ID: id, End: time.Unix(0, ts[k+1]).UTC(), Value: float64(ts[k+1]-x) / 1e9}
					}
				} else if wm-x > int64(rule.After) {
					want[id] = Alert{ID: id, Value: float64(wm-x) / 1e9}
				}
			}
		}
	}
	return want
}

// TestSequenceMatchesBruteForce: matches found over shuffled, duplicated
// batches equal those of the sorted events.
func TestSequenceMatchesBruteForce(t *testing.T) {
	rs := mustRules(t, `
rules:
  - {name: door-heat, kind: sequence, first: {metric: door, op: "==", value: 1}, then: {metric: temp, op: ">", value: 30}, within: 20s}
  - {name: ab, kind: sequence, first: {metric: temp, op: ">", value: 10}, then: {metric: temp, op: ">", value: 40}, within: 15s}
`)
	for seed := range uint64(50) {
		r := rand.New(rand.NewPCG(seed, 11))
		var evs []tev
		for range 80 {
			e := tev{dev: []string{"a", "b", "c"}[r.IntN(3)], t: at(time.Duration(r.IntN(100)) * 3 * time.Second)}
			if r.IntN(2) == 0 {
				e.metric, e.v = "door", float64(r.IntN(2))
			} else {
				e.metric, e.v = "temp", float64(r.IntN(60))
			}
			evs = append(evs, e)
		}
		ev := newEval(t, rs, Options{})
		seq := map[string]uint64{}
		for _, b := range deliveries(r, evs, 0.3) {
			ev.ObserveBatch(batchOf(b, seq, 0))
		}
		checkFiring(t, ev, bruteSequence(rs, evs), true)
	}
}

func bruteSequence(rs []Rule, evs []tev) map[string]Alert {
	want := map[string]Alert{}
	sorted := slices.Clone(evs)
	slices.SortStableFunc(sorted, func(a, b tev) int {
		switch {
		case a.t < b.t:
			return -1
		case a.t > b.t:
			return 1
		}
		return 0
	})
	for i := range rs {
		rule := &rs[i]
		for _, a := range sorted {
			if !rule.First.Match(a.metric, a.v) {
				continue
			}
			// The first Then strictly after a, unless another First comes
			// before it.
			for _, b := range sorted {
				if b.dev != a.dev || b.t <= a.t {
					continue
				}
				if rule.Then.Match(b.metric, b.v) {
					if b.t-a.t <= int64(rule.Within) && !firstBetween(rule, sorted, a, b.t) {
						id := alertID(rule.Name, "device="+a.dev, a.t)
						want[id] = Alert{ID: id, End: time.Unix(0, b.t).UTC(), Value: float64(b.t-a.t) / 1e9}
					}
					break
				}
			}
		}
	}
	return want
}

func firstBetween(rule *Rule, sorted []tev, a tev, bt int64) bool {
	for _, x := range sorted {
		if x.dev == a.dev && x.t > a.t && x.t < bt && rule.First.Match(x.metric, x.v) {
			return true
		}
	}
	return false
}
