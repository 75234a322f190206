package simulator

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestCompareRanges(t *testing.T) {
	tests := []struct {
		name          string
		appended      uint64
		applied, gaps [][2]uint64
		want          RangeCheck
	}{
		{"exact", 100, [][2]uint64{{1, 100}}, nil, RangeCheck{Applied: 100}},
		{"hole", 100, [][2]uint64{{1, 40}, {51, 100}}, nil, RangeCheck{Applied: 90, Lost: 10}},
		{"hole is a reported gap", 100, [][2]uint64{{1, 40}, {51, 100}}, [][2]uint64{{41, 50}}, RangeCheck{Applied: 90, Gaps: 10}},
		{"extra beyond appended", 100, [][2]uint64{{1, 105}}, nil, RangeCheck{Applied: 100, Extra: 5}},
		{"unknown to hub", 100, nil, nil, RangeCheck{Lost: 100}},
		{"nothing appended", 0, nil, nil, RangeCheck{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := CompareRanges(tc.appended, tc.applied, tc.gaps); got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// fakeHub serves /v1/devices/{id} and /v1/aggregates from a truth, with
// edit applied to the windows it returns; aggregates can be switched off.
func fakeHub(t *testing.T, tr *Truth, aggregates bool, edit func([]map[string]any) []map[string]any) *httptest.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/devices/{id}", func(w http.ResponseWriter, r *http.Request) {
		for _, d := range tr.Devices {
			if d.Device == r.PathValue("id") {
				_ = json.NewEncoder(w).Encode(map[string]any{"streams": []any{map[string]any{
					"stream_id": d.StreamID, "applied": [][2]uint64{{1, d.Appended}}, "gaps": [][2]uint64{}}}})
				return
			}
		}
		http.NotFound(w, r)
	})
	if aggregates {
		mux.HandleFunc("GET /v1/aggregates", func(w http.ResponseWriter, r *http.Request) {
			q := r.URL.Query()
			win, err := ParseWindow(q.Get("window"), tr.Resolution)
			if err != nil || q.Get("group_by") != "device" {
				http.Error(w, "bad query", 400)
				return
			}
			from, _ := time.Parse(time.RFC3339Nano, q.Get("from"))
			to, _ := time.Parse(time.RFC3339Nano, q.Get("to"))
			exp, _ := tr.Expected(win, q.Get("metric"))
			var out []map[string]any
			for k, a := range exp {
				if k.Start < from.UnixNano() || k.Start >= to.UnixNano() {
					continue
				}
				out = append(out, map[string]any{"start": time.Unix(0, k.Start).UTC(), "end": time.Unix(0, k.Start).Add(win.Size).UTC(),
					"group": map[string]string{"device": k.Device}, "count": a.Count, "sum": a.Sum, "min": a.Min, "max": a.Max, "avg": a.Avg(),
					"final": true, "revision": 0, "late": 0, "behind": 0})
			}
			if edit != nil {
				out = edit(out)
			}
			_ = json.NewEncoder(w).Encode(map[string]any{"metric": q.Get("metric"), "window": q.Get("window"), "windows": out})
		})
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func TestVerifyAgainstFakeHub(t *testing.T) {
	tr := truthOf("d1", [][2]float64{{1, 1}, {9, 2}, {11, 4}, {25, -1}, {59, 8}, {61, 16}})
	tr.Devices[0].StreamID = "00"
	tr.Windows = []string{"tumbling:10s", "hopping:30s/10s"}

	t.Run("match", func(t *testing.T) {
		srv := fakeHub(t, tr, true, nil)
		vr, err := Verify(context.Background(), tr, VerifyOptions{HubURL: srv.URL})
		if err != nil {
			t.Fatal(err)
		}
		if !vr.OK || vr.Lost != 0 || vr.Applied != 6 || len(vr.Windows) != 2 || vr.Windows[0].Match != 5 || vr.Windows[1].Match != 9 {
			t.Errorf("%+v", vr)
		}
		if vr.TimeError.Measured || vr.TimeError.Note == "" {
			t.Errorf("time error %+v: want not measured", vr.TimeError)
		}
	})
	t.Run("differ missing unexpected", func(t *testing.T) {
		srv := fakeHub(t, tr, true, func(ws []map[string]any) []map[string]any {
			var out []map[string]any
			for _, w := range ws {
				switch w["start"].(time.Time).Unix() {
				case 0:
					w["count"] = w["count"].(uint64) + 1 // double counted
				case 10:
					continue // missing
				}
				out = append(out, w)
			}
			return append(out, map[string]any{"start": time.Unix(3600, 0).UTC(), "group": map[string]string{"device": "d1"}, "count": 1})
		})
		vr, err := Verify(context.Background(), tr, VerifyOptions{HubURL: srv.URL, Windows: []string{"tumbling:10s"}})
		if err != nil {
			t.Fatal(err)
		}
		w := vr.Windows[0]
		if vr.OK || w.Differ != 1 || w.Missing != 1 || w.Unexpected != 1 || w.Match != 3 || len(w.Examples) != 3 {
			t.Errorf("%+v", w)
		}
	})
	t.Run("aggregates not available", func(t *testing.T) {
		srv := fakeHub(t, tr, false, nil)
		vr, err := Verify(context.Background(), tr, VerifyOptions{HubURL: srv.URL})
		if err != nil {
			t.Fatal(err)
		}
		if !vr.OK || vr.Windows[0].Available || !strings.Contains(vr.Windows[0].Note, "not available") {
			t.Errorf("%+v", vr.Windows[0])
		}
	})
	t.Run("loss", func(t *testing.T) {
		lossy := *tr
		d := *tr.Devices[0]
		d.Appended = 8 // the hub applied only 6
		lossy.Devices = []*DeviceTruth{&d}
		srv := fakeHub(t, tr, false, nil)
		vr, err := Verify(context.Background(), &lossy, VerifyOptions{HubURL: srv.URL, Settle: 300 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if vr.OK || vr.Lost != 2 || len(vr.LossDevices) != 1 {
			t.Errorf("%+v", vr)
		}
	})
	t.Run("applied after the ack", func(t *testing.T) {
		// The hub answers the first two reads before applying the last two
		// events (acked, durable, not yet applied): not a loss.
		d := *tr.Devices[0]
		d.Appended = 8
		one := *tr
		one.Devices = []*DeviceTruth{&d}
		var reads atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/v1/devices/"+d.Device {
				http.NotFound(w, r) // no aggregates, no events
				return
			}
			applied := uint64(6)
			if reads.Add(1) > 2 {
				applied = 8
			}
			_ = json.NewEncoder(w).Encode(map[string]any{"streams": []any{map[string]any{
				"stream_id": d.StreamID, "applied": [][2]uint64{{1, applied}}, "gaps": [][2]uint64{}}}})
		}))
		t.Cleanup(srv.Close)
		vr, err := Verify(context.Background(), &one, VerifyOptions{HubURL: srv.URL})
		if err != nil {
			t.Fatal(err)
		}
		if vr.Lost != 0 || vr.Applied != 8 || reads.Load() != 3 {
			t.Errorf("lost %d applied %d after %d reads, want 0, 8 after 3", vr.Lost, vr.Applied, reads.Load())
		}
	})
}
