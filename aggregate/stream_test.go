package aggregate

import (
	"errors"
	"slices"
	"testing"
	"time"
)

// TestMergedStream: events come out in event-time order as the watermark
// passes, late ones flagged; readers resume by offset; a reader that fell
// behind the ring gets ErrOffsetTooOld and the oldest offset.
func TestMergedStream(t *testing.T) {
	opt := testOptions()
	opt.StreamBuffer = 8
	e := newEngine(t, opt)
	mustApply(t, e, batchOf("a", 1, at(time.Minute), ev{seq: 1, metric: "m", v: 1, t: at(1 * time.Second)}, ev{seq: 2, metric: "m", v: 2, t: at(5 * time.Second)}))
	mustApply(t, e, batchOf("b", 2, at(time.Minute), ev{seq: 1, metric: "m", v: 3, t: at(2 * time.Second)}, ev{seq: 2, metric: "m", v: 4, t: at(4 * time.Second)}))
	mustApply(t, e, batchOf("a", 1, at(time.Minute), ev{seq: 3, metric: "m", v: 5, t: at(9 * time.Second)}))
	mustApply(t, e, batchOf("b", 2, at(time.Minute), ev{seq: 3, metric: "m", v: 6, t: at(8 * time.Second)}))
	got, next, err := e.ReadStream(0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var vals []float64
	for _, se := range got {
		vals = append(vals, se.Value)
	}
	// Released below the hub watermark (8 s): 1@1s 3@2s 4@4s 2@5s.
	if !slices.Equal(vals, []float64{1, 3, 4, 2}) || next != 4 {
		t.Fatalf("released %v next %d", vals, next)
	}
	mustApply(t, e, batchOf("b", 2, at(time.Minute), ev{seq: 4, metric: "m", v: 7, t: at(3 * time.Second)})) // late
	more, next, err := e.ReadStream(next, 100)
	if err != nil || len(more) != 1 || !more[0].Late || more[0].Value != 7 || more[0].Offset != 4 || next != 5 {
		t.Fatalf("late release %+v next %d err %v", more, next, err)
	}
	for i := 0; i < 10; i++ {
		mustApply(t, e, batchOf("b", 2, at(time.Minute), ev{seq: uint64(5 + i), metric: "m", v: 8, t: at(time.Second)}))
	}
	_, oldest, err := e.ReadStream(0, 1)
	if !errors.Is(err, ErrOffsetTooOld) || oldest != 15-8 {
		t.Fatalf("got oldest %d err %v", oldest, err)
	}
}

// TestSubscriptions: subscribers hear about final and revised windows; a
// slow one is dropped with a reason and never blocks Apply.
func TestSubscriptions(t *testing.T) {
	e := newEngine(t, testOptions())
	fast := e.Subscribe(1000)
	slow := e.Subscribe(1)
	var sa uint64
	mustApply(t, e, series10s("a", 1, &sa, 0, time.Minute, at(time.Minute)))
	mustApply(t, e, series10s("a", 1, &sa, time.Minute, 3*time.Minute, at(3*time.Minute)))
	mustApply(t, e, batchOf("a", 1, at(3*time.Minute), ev{seq: 99, metric: "m", v: 1, t: at(30 * time.Second)}))
	if _, open := <-slow.Updates(); !open {
		t.Fatal("slow subscriber got nothing")
	}
	for range slow.Updates() {
	}
	if !errors.Is(slow.Err(), ErrSlowSubscriber) {
		t.Fatalf("slow subscriber: %v", slow.Err())
	}
	fast.Close()
	var finals, revised []Update
	for u := range fast.Updates() {
		switch u.Kind {
		case UpdateFinal:
			finals = append(finals, u)
		case UpdateRevised:
			revised = append(revised, u)
		}
	}
	if !containsUpdate(finals, "1m", time.Minute, 2*time.Minute) {
		t.Errorf("no final for 1m [1m, 2m): %+v", finals)
	}
	if !containsUpdate(revised, "1m", 0, time.Minute) || !containsUpdate(revised, "5m/1m", -4*time.Minute, time.Minute) {
		t.Errorf("revisions %+v", revised)
	}
	if fast.Err() != nil || e.Stats().SubscribersDropped != 1 {
		t.Errorf("fast err %v dropped %d", fast.Err(), e.Stats().SubscribersDropped)
	}
}

func containsUpdate(us []Update, window string, start, end time.Duration) bool {
	return slices.ContainsFunc(us, func(u Update) bool {
		return u.Window == window && u.Start.Equal(t0.Add(start)) && u.End.Equal(t0.Add(end))
	})
}
