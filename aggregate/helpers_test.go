package aggregate

import (
	"fmt"
	"testing"
	"time"
)

// t0 is a round base time for tests (a multiple of every window used).
var t0 = time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)

func at(d time.Duration) int64 { return t0.Add(d).UnixNano() }

// fakeClock is an injected processing clock.
type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time { return c.now }

// testOptions are small-interval options for deterministic tests.
func testOptions() Options {
	return Options{
		Resolution:        10 * time.Second,
		IdleTimeout:       time.Minute,
		MaxFutureSkew:     time.Minute,
		WatermarkInterval: time.Nanosecond,
		LateHorizon:       24 * time.Hour,
		Windows: []WindowConfig{
			{Name: "1m", Kind: "tumbling", Size: time.Minute},
			{Name: "5m/1m", Kind: "hopping", Size: 5 * time.Minute, Slide: time.Minute},
			{Name: "sess", Kind: "session", Gap: 30 * time.Second},
		},
	}
}

func newEngine(t testing.TB, opt Options) *Engine {
	t.Helper()
	e, err := New(opt)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func sid(n int) StreamID {
	var id StreamID
	copy(id[:], fmt.Sprintf("stream-%d", n))
	return id
}

// ev is a compact event for tests.
type ev struct {
	seq    uint64
	metric string
	tags   []Tag
	v      float64
	t      int64
}

func (x ev) event() Event {
	return Event{Seq: x.seq, Metric: x.metric, Tags: x.tags, Value: x.v, Time: x.t}
}

// batchOf builds one batch of one stream.
func batchOf(dev string, stream int, server int64, evs ...ev) *Batch {
	b := &Batch{Device: dev, Stream: sid(stream), ServerTime: server}
	for _, x := range evs {
		b.Events = append(b.Events, x.event())
	}
	return b
}

func mustApply(t testing.TB, e *Engine, b *Batch) {
	t.Helper()
	if err := e.Apply(b); err != nil {
		t.Fatal(err)
	}
}

func mustQuery(t testing.TB, e *Engine, q Query) []WindowResult {
	t.Helper()
	out, err := e.Query(q)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func dayQuery(metric string, w WindowSpec, groupBy ...string) Query {
	return Query{Metric: metric, Window: w, From: t0.Add(-24 * time.Hour), To: t0.Add(48 * time.Hour), GroupBy: groupBy}
}

func nan() float64 { var z float64; return z / z }
