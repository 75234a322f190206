package hub

import (
	"edgeflow/hub/hubapi"
	"testing"
	"time"
)

// TestAggregatesDeviceFilter checks that device= restricts /v1/aggregates
// to one device's series, with the same numbers as the unfiltered query.
func TestAggregatesDeviceFilter(t *testing.T) {
	s := startHub(t, aggTestOptions(t, t.TempDir()))
	a := newDevice(t, "tcp://"+s.BrokerAddr(), "df1")
	b := newDevice(t, "tcp://"+s.BrokerAddr(), "df2")
	base := time.Now().Add(-10 * time.Minute).Truncate(time.Minute)
	at := func(sec int) int64 { return base.Add(time.Duration(sec) * time.Second).UnixNano() }
	a.send(timedBatch("df1", a.stream, 1, []int64{at(1), at(2), at(70)}, []float64{1, 2, 7}))
	b.send(timedBatch("df2", b.stream, 1, []int64{at(3)}, []float64{-1}))
	path := aggPath("temp", "tumbling:1m", base, base.Add(time.Hour), "&group_by=device&aggs=count,sum")
	var all, one hubapi.AggregatesResponse
	deadline := time.Now().Add(15 * time.Second)
	for {
		getJSON(t, s.Handler(), path, &all)
		if len(all.Windows) == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("unfiltered: %d windows, want 3", len(all.Windows))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code, body := getJSON(t, s.Handler(), path+"&device=df1", &one); code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	if len(one.Windows) != 2 {
		t.Fatalf("device=df1: %d windows, want 2: %+v", len(one.Windows), one.Windows)
	}
	for i, w := range one.Windows {
		if w.Group["device"] != "df1" {
			t.Fatalf("window of %q in a device=df1 query", w.Group["device"])
		}
		if want := []uint64{2, 1}[i]; w.Count != want || *w.Sum != []float64{3, 7}[i] {
			t.Fatalf("window %d: count %d sum %v", i, w.Count, *w.Sum)
		}
	}
	if code, body := getJSON(t, s.Handler(), path+"&device=nobody", &one); code != 200 || len(one.Windows) != 0 {
		t.Fatalf("device=nobody: %d %s", code, body)
	}
}
