package aggregate

import (
	"errors"
	"testing"
	"time"
)

type win struct {
	start, end time.Duration
	count      uint64
	sum        float64
}

// TestWindowAssignment checks which windows each kind produces from a
// fixed set of events (values 1, 2, 4, 8, 16 at the given offsets).
func TestWindowAssignment(t *testing.T) {
	times := []time.Duration{5 * time.Second, 15 * time.Second, 65 * time.Second, 70 * time.Second, 200 * time.Second}
	cases := []struct {
		name string
		spec WindowSpec
		want []win
	}{
		{"tumbling 10s", WindowSpec{Kind: Tumbling, Size: 10 * time.Second}, []win{
			{0, 10 * time.Second, 1, 1}, {10 * time.Second, 20 * time.Second, 1, 2},
			{60 * time.Second, 70 * time.Second, 1, 4}, {70 * time.Second, 80 * time.Second, 1, 8},
			{200 * time.Second, 210 * time.Second, 1, 16}}},
		{"tumbling 1m", WindowSpec{Kind: Tumbling, Size: time.Minute}, []win{
			{0, time.Minute, 2, 3}, {time.Minute, 2 * time.Minute, 2, 12}, {3 * time.Minute, 4 * time.Minute, 1, 16}}},
		{"hopping 2m/1m", WindowSpec{Kind: Hopping, Size: 2 * time.Minute, Slide: time.Minute}, []win{
			{-time.Minute, time.Minute, 2, 3}, {0, 2 * time.Minute, 4, 15}, {time.Minute, 3 * time.Minute, 2, 12},
			{2 * time.Minute, 4 * time.Minute, 1, 16}, {3 * time.Minute, 5 * time.Minute, 1, 16}}},
		{"hopping 10s/30s (gaps)", WindowSpec{Kind: Hopping, Size: 10 * time.Second, Slide: 30 * time.Second}, []win{
			{0, 10 * time.Second, 1, 1}, {60 * time.Second, 70 * time.Second, 1, 4}}},
		{"sliding 20s", WindowSpec{Kind: Sliding, Size: 20 * time.Second}, []win{
			{-10 * time.Second, 10 * time.Second, 1, 1}, {0, 20 * time.Second, 2, 3}, {10 * time.Second, 30 * time.Second, 1, 2},
			{50 * time.Second, 70 * time.Second, 1, 4}, {60 * time.Second, 80 * time.Second, 2, 12}, {70 * time.Second, 90 * time.Second, 1, 8},
			{190 * time.Second, 210 * time.Second, 1, 16}, {200 * time.Second, 220 * time.Second, 1, 16}}},
		{"session 30s", WindowSpec{Kind: Session, Gap: 30 * time.Second}, []win{
			{5 * time.Second, 45 * time.Second, 2, 3}, {65 * time.Second, 100 * time.Second, 2, 12}, {200 * time.Second, 230 * time.Second, 1, 16}}},
		{"session 60s", WindowSpec{Kind: Session, Gap: 60 * time.Second}, []win{
			{5 * time.Second, 130 * time.Second, 4, 15}, {200 * time.Second, 260 * time.Second, 1, 16}}},
	}
	e := newEngine(t, testOptions())
	b := &Batch{Device: "d", Stream: sid(1), ServerTime: at(time.Hour)}
	for i, d := range times {
		b.Events = append(b.Events, Event{Seq: uint64(i + 1), Metric: "m", Value: float64(int(1) << i), Time: at(d)})
	}
	mustApply(t, e, b)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := mustQuery(t, e, Query{Metric: "m", Window: c.spec, From: t0.Add(-time.Hour), To: t0.Add(time.Hour)})
			if len(got) != len(c.want) {
				t.Fatalf("got %d windows %v, want %d", len(got), got, len(c.want))
			}
			for i, w := range c.want {
				g := got[i]
				if !g.Start.Equal(t0.Add(w.start)) || !g.End.Equal(t0.Add(w.end)) || g.Count != w.count || g.Sum != w.sum {
					t.Errorf("window %d: got [%v, %v) count %d sum %v, want [%v, %v) count %d sum %v", i,
						g.Start.Sub(t0), g.End.Sub(t0), g.Count, g.Sum, w.start, w.end, w.count, w.sum)
				}
			}
		})
	}
}

// TestQueryValidation checks that every bad parameter is named.
func TestQueryValidation(t *testing.T) {
	opt := testOptions()
	opt.TagKeys = []string{"room"}
	e := newEngine(t, opt)
	ok := Query{Metric: "m", Window: WindowSpec{Kind: Tumbling, Size: time.Minute}, From: t0, To: t0.Add(time.Hour)}
	cases := []struct {
		param string
		edit  func(q *Query)
	}{
		{"metric", func(q *Query) { q.Metric = "" }},
		{"size", func(q *Query) { q.Window.Size = 15 * time.Second }},
		{"size", func(q *Query) { q.Window.Size = 0 }},
		{"slide", func(q *Query) { q.Window = WindowSpec{Kind: Hopping, Size: time.Minute, Slide: 5 * time.Second} }},
		{"gap", func(q *Query) { q.Window = WindowSpec{Kind: Session} }},
		{"window", func(q *Query) { q.Window = WindowSpec{} }},
		{"window", func(q *Query) { q.WindowName = "nope" }},
		{"from", func(q *Query) { q.To = q.From }},
		{"group_by", func(q *Query) { q.GroupBy = []string{"floor"} }},
		{"group_by", func(q *Query) { q.GroupBy = []string{"device", "device"} }},
		{"limit", func(q *Query) { q.Limit = 1 << 30 }},
	}
	for _, c := range cases {
		q := ok
		c.edit(&q)
		_, err := e.Query(q)
		var pe *ParamError
		if !errors.As(err, &pe) || pe.Param != c.param || !errors.Is(err, ErrInvalidQuery) {
			t.Errorf("%s: got %v, want a ParamError for %s", c.param, err, c.param)
		}
	}
	if _, err := e.Query(ok); err != nil {
		t.Fatalf("valid query: %v", err)
	}
	if _, err := ParseAggs([]string{"count", "p42"}); err == nil {
		t.Error("ParseAggs accepted p42")
	}
	if w, err := ParseWindowSpec("hopping:5m/1m"); err != nil || w.Size != 5*time.Minute || w.Slide != time.Minute {
		t.Errorf("ParseWindowSpec: %v %v", w, err)
	}
}

// TestResultLimit checks the result cap error.
func TestResultLimit(t *testing.T) {
	e := newEngine(t, testOptions())
	b := &Batch{Device: "d", Stream: sid(1), ServerTime: at(time.Hour)}
	for i := 0; i < 100; i++ {
		b.Events = append(b.Events, Event{Seq: uint64(i + 1), Metric: "m", Value: 1, Time: at(time.Duration(i) * 10 * time.Second)})
	}
	mustApply(t, e, b)
	q := Query{Metric: "m", Window: WindowSpec{Kind: Tumbling, Size: 10 * time.Second}, From: t0, To: t0.Add(time.Hour), Limit: 50}
	_, err := e.Query(q)
	var le *LimitError
	if !errors.As(err, &le) || le.Limit != "max_query_results" || le.Max != 50 {
		t.Fatalf("got %v, want a max_query_results LimitError", err)
	}
}

// TestOptionsValidate checks that Validate names the bad field.
func TestOptionsValidate(t *testing.T) {
	cases := []struct {
		field string
		edit  func(o *Options)
	}{
		{"resolution", func(o *Options) { o.Resolution = -time.Second }},
		{"allowed_lateness", func(o *Options) { o.AllowedLateness = -1 }},
		{"sketch_accuracy", func(o *Options) { o.SketchAccuracy = 2 }},
		{"max_series", func(o *Options) { o.MaxSeries = -1 }},
		{"windows[0].kind", func(o *Options) { o.Windows[0].Kind = "rolling" }},
		{"windows[1].name", func(o *Options) { o.Windows[1].Name = o.Windows[0].Name }},
		{"size", func(o *Options) { o.Windows[0].Size = 7 * time.Second }},
	}
	for _, c := range cases {
		o := testOptions()
		c.edit(&o)
		o.EnsureDefaults()
		err := o.Validate()
		if err == nil || !errors.Is(err, ErrInvalidOption) || !contains(err.Error(), c.field) {
			t.Errorf("%s: got %v", c.field, err)
		}
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}
