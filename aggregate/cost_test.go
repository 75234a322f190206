package aggregate

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// randomCostQuery draws an aligned or session query over a random range,
// grouping and device of genFleet's data.
func randomCostQuery(r *rand.Rand) Query {
	specs := []WindowSpec{
		{Kind: Tumbling, Size: time.Duration(1+r.IntN(12)) * 10 * time.Second},
		{Kind: Hopping, Size: time.Duration(1+r.IntN(30)) * 10 * time.Second, Slide: time.Duration(1+r.IntN(12)) * 10 * time.Second},
		{Kind: Sliding, Size: time.Duration(1+r.IntN(6)) * 10 * time.Second},
		{Kind: Session, Gap: time.Duration(1+r.IntN(6)) * 10 * time.Second},
	}
	q := Query{Metric: "m", Window: specs[r.IntN(len(specs))], GroupBy: propGroups[r.IntN(len(propGroups))]}
	from := t0.Add(time.Duration(r.IntN(50)-5) * time.Minute).Add(time.Duration(r.IntN(60)) * time.Second)
	q.From, q.To = from, from.Add(time.Duration(1+r.IntN(3600))*time.Second)
	if r.IntN(4) == 0 {
		q.Device = fmt.Sprintf("dev-%d", r.IntN(5))
	}
	return q
}

// TestCostFloorNeverRefusesWhatFits: over random data (live or evicted to
// the store) and random queries, a query asked with limit equal to its
// number of windows always answers (the early refusal never fires for a
// query that fits), and with one less it is refused. Where the floor is
// exact (every group one series, everything live, aligned windows) that
// refusal comes before any work.
func TestCostFloorNeverRefusesWhatFits(t *testing.T) {
	r := rand.New(rand.NewPCG(28, 5))
	refusedEarly, exact := 0, 0
	for trial := 0; trial < 12; trial++ {
		opt := propOptions()
		live := trial%2 == 0
		opt.EvictAfter = 2000 * time.Hour
		if !live {
			opt.EvictAfter = time.Minute
			opt.Store = NewMemStore()
		}
		e := runAll(t, opt, deliver(r, genFleet(r)))
		if evicted := e.Stats().Evicted; live != (evicted == 0) {
			t.Fatalf("live %v, %d partials evicted", live, evicted)
		}
		for i := 0; i < 60; i++ {
			q := randomCostQuery(r)
			all, err := e.Query(q)
			if err != nil {
				t.Fatalf("%+v: %v", q, err)
			}
			if len(all) == 0 {
				continue
			}
			q.Limit = len(all)
			got, err := e.Query(q)
			if err != nil || len(got) != len(all) {
				t.Fatalf("trial %d %+v with limit %d: %d windows, %v", trial, q, q.Limit, len(got), err)
			}
			if len(all) == 1 {
				continue
			}
			q.Limit = len(all) - 1
			_, err = e.Query(q)
			var le *LimitError
			if !errors.As(err, &le) || le.Limit != "max_query_results" || le.Max != q.Limit || le.Need <= q.Limit {
				t.Fatalf("trial %d %+v with limit %d of %d: %v", trial, q, q.Limit, len(all), err)
			}
			if le.Estimated {
				refusedEarly++
			}
			oneSeries := len(q.GroupBy) == 2 // device and room: the series' identity
			if live && oneSeries && q.Window.Kind != Session {
				exact++
				if !le.Estimated {
					t.Fatalf("trial %d %+v: an exact floor of %d windows was not refused early: %v", trial, q, len(all), err)
				}
			}
		}
	}
	if refusedEarly == 0 || exact == 0 {
		t.Fatalf("refused early %d, exact floors %d: the estimator was not exercised", refusedEarly, exact)
	}
	t.Logf("%d queries refused before any work, %d with an exact floor", refusedEarly, exact)
}

// TestCostRefusesManySeriesEarly: a metric of many series, each with a
// few windows, grouped by series: refused before any work by a floor
// over the cap, and answered in full with the cap raised.
func TestCostRefusesManySeriesEarly(t *testing.T) {
	opt := testOptions()
	opt.MaxQueryResults = 500
	e := newEngine(t, opt)
	const devices = 400
	for d := 0; d < devices; d++ {
		mustApply(t, e, batchOf(fmt.Sprintf("d%03d", d), d, at(time.Hour),
			ev{seq: 1, metric: "m", v: 1, t: at(time.Minute)}, ev{seq: 2, metric: "m", v: 2, t: at(3 * time.Minute)}))
	}
	q := Query{Metric: "m", Window: WindowSpec{Kind: Hopping, Size: 5 * time.Minute, Slide: time.Minute},
		GroupBy: []string{"device"}, From: t0, To: t0.Add(time.Hour)}
	_, err := e.Query(q)
	var le *LimitError
	// Each device: starts 0..3m (holding the 1m event and the 3m one): 4;
	// the floor passes 500 at the 126th device.
	if !errors.As(err, &le) || !le.Estimated || le.Limit != "max_query_results" || le.Max != 500 || le.Need != 504 {
		t.Fatalf("err %v (%+v)", err, le)
	}
	q.GroupBy, q.Device = nil, "d007"
	if got := mustQuery(t, e, q); len(got) != 4 {
		t.Fatalf("one device: %d windows", len(got))
	}
	opt.MaxQueryResults = 4 * devices
	e2 := newEngine(t, opt)
	for d := 0; d < devices; d++ {
		mustApply(t, e2, batchOf(fmt.Sprintf("d%03d", d), d, at(time.Hour),
			ev{seq: 1, metric: "m", v: 1, t: at(time.Minute)}, ev{seq: 2, metric: "m", v: 2, t: at(3 * time.Minute)}))
	}
	q.GroupBy, q.Device = []string{"device"}, ""
	if got := mustQuery(t, e2, q); len(got) != 4*devices {
		t.Fatalf("raised cap: %d windows", len(got))
	}
}

// TestQueryContextCancelled: a query whose context is done stops with an
// error wrapping the context's.
func TestQueryContextCancelled(t *testing.T) {
	e := newEngine(t, testOptions())
	for d := 0; d < 3*ctxCheckEvery; d++ {
		mustApply(t, e, batchOf(fmt.Sprintf("d%04d", d), d, at(time.Hour), ev{seq: 1, metric: "m", v: 1, t: at(time.Minute)}))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	q := Query{Metric: "m", Window: WindowSpec{Kind: Tumbling, Size: time.Minute}, GroupBy: []string{"device"}, From: t0, To: t0.Add(time.Hour)}
	if _, err := e.QueryContext(ctx, q); !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
	if got, err := e.QueryContext(context.Background(), q); err != nil || len(got) != 3*ctxCheckEvery {
		t.Fatalf("%d windows, %v", len(got), err)
	}
}

// TestFoldManySeries: a group of more series than one fold takes (so
// several folds and a final one) answers as a brute force does.
func TestFoldManySeries(t *testing.T) {
	e := newEngine(t, testOptions())
	const devices = 3*foldRun + 17
	type win struct {
		count    uint64
		sum      float64
		min, max float64
	}
	want := map[int64]*win{}
	for d := 0; d < devices; d++ {
		var evs []ev
		for i := 0; i < 2; i++ {
			tm := at(time.Duration((d*7+i*13)%120) * 10 * time.Second)
			v := float64((d+i)%11 - 5)
			evs = append(evs, ev{seq: uint64(i + 1), metric: "m", v: v, t: tm})
			k := (tm - t0.UnixNano()) / int64(time.Minute)
			w := want[k]
			if w == nil {
				w = &win{min: v, max: v}
				want[k] = w
			}
			w.count++
			w.sum += v
			w.min, w.max = min(w.min, v), max(w.max, v)
		}
		mustApply(t, e, batchOf(fmt.Sprintf("d%05d", d), d, at(time.Hour), evs...))
	}
	got := mustQuery(t, e, Query{Metric: "m", Window: WindowSpec{Kind: Tumbling, Size: time.Minute}, From: t0, To: t0.Add(time.Hour)})
	if len(got) != len(want) {
		t.Fatalf("%d windows, want %d", len(got), len(want))
	}
	for _, w := range got {
		b := want[w.Start.Sub(t0).Nanoseconds()/int64(time.Minute)]
		if b == nil || w.Count != b.count || w.Sum != b.sum || w.Min != b.min || w.Max != b.max {
			t.Fatalf("window %v: %+v, want %+v", w.Start, w, b)
		}
	}
}
