package simulator

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
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

// fakeHub configures a fake hub's answers.
type fakeHub struct {
	// aggregates serves GET /v1/aggregates from the truth, at resolution
	// (default the truth's): a window that is not a multiple of it is a
	// 400, as the real hub answers.
	aggregates bool
	resolution time.Duration
	// aggStatus, if set, is the status of every GET /v1/aggregates.
	aggStatus int
	// edit changes the windows returned.
	edit func([]map[string]any) []map[string]any
	// extra is how many sequence numbers beyond Appended each stream's
	// applied range claims.
	extra uint64
	// events, if not nil, are served by GET /v1/events per device in the
	// shape of hubapi.EventsResponse, at most pageSize (default 10000) a page.
	events   map[string][]fakeEvent
	pageSize int
	// eventsStatus, if set, fails GET /v1/events for these devices.
	eventsStatus map[string]int
	// partial, if set, counts down: while positive, GET /v1/aggregates
	// answers as a cluster's hub missing partition 3 (its windows of d1
	// left out, "partial": true), as while a dead hub's partitions have
	// no owner yet; unavailable does the same for GET /v1/devices/{id},
	// answered with a 503.
	partial, unavailable *atomic.Int32
}

// fakeEvent is one event as GET /v1/events returns it.
type fakeEvent struct {
	stream string
	seq    uint64
	timeNs int64
}

// serve starts the fake hub for tr.
func (fh fakeHub) serve(t *testing.T, tr *Truth) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/devices/{id}", func(w http.ResponseWriter, r *http.Request) {
		if fh.unavailable != nil && fh.unavailable.Add(-1) >= 0 {
			http.Error(w, `{"error":"partition 3 has no current owner"}`, http.StatusServiceUnavailable)
			return
		}
		for _, d := range tr.Devices {
			if d.Device == r.PathValue("id") {
				_ = json.NewEncoder(w).Encode(map[string]any{"streams": []any{map[string]any{
					"stream_id": d.StreamID, "applied": [][2]uint64{{1, d.Appended + fh.extra}}, "gaps": [][2]uint64{}}}})
				return
			}
		}
		http.NotFound(w, r)
	})
	if fh.aggregates {
		res := cmp.Or(fh.resolution, tr.Resolution)
		mux.HandleFunc("GET /v1/aggregates", func(w http.ResponseWriter, r *http.Request) {
			if fh.aggStatus != 0 {
				http.Error(w, `{"error":"engine failed"}`, fh.aggStatus)
				return
			}
			q := r.URL.Query()
			win, err := ParseWindow(q.Get("window"), res)
			if err != nil || q.Get("group_by") != "device" {
				http.Error(w, fmt.Sprintf(`{"error":"invalid query parameter window: %v"}`, err), 400)
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
			if fh.edit != nil {
				out = fh.edit(out)
			}
			if fh.partial != nil && fh.partial.Add(-1) >= 0 {
				_ = json.NewEncoder(w).Encode(map[string]any{"metric": q.Get("metric"), "window": q.Get("window"), "windows": []any{},
					"partial": true, "missing_partitions": []int{3}})
				return
			}
			_ = json.NewEncoder(w).Encode(map[string]any{"metric": q.Get("metric"), "window": q.Get("window"), "windows": out})
		})
	}
	if fh.events != nil {
		mux.HandleFunc("GET /v1/events", fh.serveEvents)
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// serveEvents answers as hub.Server's GET /v1/events does: the device's
// events in [from, to) in time order, limit at a time, truncated with
// next_from the time of the first left out.
func (fh fakeHub) serveEvents(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	dev := q.Get("device")
	if code := fh.eventsStatus[dev]; code != 0 {
		http.Error(w, `{"error":"log read failed"}`, code)
		return
	}
	from, err1 := time.Parse(time.RFC3339Nano, q.Get("from"))
	to, err2 := time.Parse(time.RFC3339Nano, q.Get("to"))
	limit, err3 := strconv.Atoi(q.Get("limit"))
	if err1 != nil || err2 != nil || err3 != nil || limit < 1 || limit > 10000 {
		http.Error(w, `{"error":"invalid query parameter"}`, 400)
		return
	}
	if fh.pageSize > 0 {
		limit = min(limit, fh.pageSize)
	}
	type event struct {
		Stream string  `json:"stream"`
		Seq    uint64  `json:"seq"`
		Metric string  `json:"metric"`
		Value  float64 `json:"value"`
		Time   string  `json:"time"`
		TimeMs int64   `json:"time_ms"`
		Method string  `json:"method"`
	}
	var evs []fakeEvent
	for _, e := range fh.events[dev] {
		if e.timeNs >= from.UnixNano() && e.timeNs < to.UnixNano() {
			evs = append(evs, e)
		}
	}
	slices.SortFunc(evs, func(a, b fakeEvent) int { return cmp.Compare(a.timeNs, b.timeNs) })
	rfc := func(ns int64) string { return time.Unix(0, ns).UTC().Format(time.RFC3339Nano) }
	out := map[string]any{"device": dev, "from": rfc(from.UnixNano()), "to": rfc(to.UnixNano()), "events": []event{}, "truncated": false, "scanned": len(evs)}
	if len(evs) > limit {
		out["truncated"], out["next_from"] = true, rfc(evs[limit].timeNs)
		evs = evs[:limit]
	}
	var list []event
	for _, e := range evs {
		list = append(list, event{Stream: e.stream, Seq: e.seq, Metric: "m", Time: rfc(e.timeNs), TimeMs: e.timeNs / 1e6, Method: "ntp"})
	}
	if list != nil {
		out["events"] = list
	}
	_ = json.NewEncoder(w).Encode(out)
}

func TestVerifyAgainstFakeHub(t *testing.T) {
	tr := truthOf("d1", [][2]float64{{1, 1}, {9, 2}, {11, 4}, {25, -1}, {59, 8}, {61, 16}})
	tr.Devices[0].StreamID = "00"
	tr.Windows = []string{"tumbling:10s", "hopping:30s/10s"}

	t.Run("match", func(t *testing.T) {
		srv := fakeHub{aggregates: true}.serve(t, tr)
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
		srv := fakeHub{aggregates: true, edit: func(ws []map[string]any) []map[string]any {
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
		}}.serve(t, tr)
		vr, err := Verify(context.Background(), tr, VerifyOptions{HubURL: srv.URL, Windows: []string{"tumbling:10s"}})
		if err != nil {
			t.Fatal(err)
		}
		w := vr.Windows[0]
		if vr.OK || w.Differ != 1 || w.Missing != 1 || w.Unexpected != 1 || w.Match != 3 || len(w.Examples) != 3 {
			t.Errorf("%+v", w)
		}
	})
	// Windows that could not be read fail the verification (nothing was
	// compared), unless the caller allows it.
	for _, tc := range []struct {
		name string
		hub  fakeHub
		note string
	}{
		{"aggregates not available", fakeHub{}, "not available"},
		{"aggregates erroring", fakeHub{aggregates: true, aggStatus: 500}, "HTTP 500"},
		{"hub at another resolution", fakeHub{aggregates: true, resolution: 20 * time.Second}, "HTTP 400"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := tc.hub.serve(t, tr)
			vr, err := Verify(context.Background(), tr, VerifyOptions{HubURL: srv.URL})
			if err != nil {
				t.Fatal(err)
			}
			w := vr.Windows[0]
			if vr.OK || w.Available || !strings.Contains(w.Note, tc.note) || vr.UnavailableWindows == 0 {
				t.Errorf("ok %v, %d unavailable, window %+v: want not OK, unavailable, note with %q", vr.OK, vr.UnavailableWindows, w, tc.note)
			}
			if len(vr.Failures) != vr.UnavailableWindows || !strings.Contains(vr.Failures[0], "not checked") || !strings.Contains(vr.Failures[0], tc.note) {
				t.Errorf("failures %q: want one per unavailable window kind, saying why", vr.Failures)
			}
			vr, err = Verify(context.Background(), tr, VerifyOptions{HubURL: srv.URL, AllowUnavailable: true})
			if err != nil {
				t.Fatal(err)
			}
			if !vr.OK || vr.UnavailableWindows == 0 || len(vr.Failures) != 0 {
				t.Errorf("AllowUnavailable: ok %v, %d unavailable, failures %q: want OK", vr.OK, vr.UnavailableWindows, vr.Failures)
			}
		})
	}
	t.Run("unverifiable by design", func(t *testing.T) {
		// A device with events captured untrusted has no verifiable
		// windows: reported, not failed, though the hub's windows are read.
		un := *tr
		d := *tr.Devices[0]
		d.Uncertain = 1
		un.Devices = []*DeviceTruth{&d}
		srv := fakeHub{aggregates: true}.serve(t, tr)
		vr, err := Verify(context.Background(), &un, VerifyOptions{HubURL: srv.URL})
		if err != nil {
			t.Fatal(err)
		}
		if w := vr.Windows[0]; !vr.OK || !w.Available || w.UnverifiableDevices != 1 || w.Match+w.Differ+w.Missing+w.Unexpected != 0 {
			t.Errorf("ok %v failures %q window %+v: want OK, one unverifiable device, nothing compared", vr.OK, vr.Failures, w)
		}
	})
	t.Run("loss", func(t *testing.T) {
		lossy := *tr
		d := *tr.Devices[0]
		d.Appended = 8 // the hub applied only 6
		lossy.Devices = []*DeviceTruth{&d}
		srv := fakeHub{aggregates: true}.serve(t, tr)
		vr, err := Verify(context.Background(), &lossy, VerifyOptions{HubURL: srv.URL, Settle: 300 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if vr.OK || vr.Lost != 2 || len(vr.LossDevices) != 1 || len(vr.Failures) != 1 || !strings.Contains(vr.Failures[0], "lost") {
			t.Errorf("%+v", vr)
		}
	})
	t.Run("applied beyond appended", func(t *testing.T) {
		// The only duplicates the applied ranges can show; windows match.
		srv := fakeHub{aggregates: true, extra: 2}.serve(t, tr)
		vr, err := Verify(context.Background(), tr, VerifyOptions{HubURL: srv.URL})
		if err != nil {
			t.Fatal(err)
		}
		if vr.OK || vr.Duplicated != 2 || vr.Lost != 0 || vr.Applied != 6 || len(vr.LossDevices) != 1 ||
			len(vr.Failures) != 1 || !strings.Contains(vr.Failures[0], "beyond") {
			t.Errorf("ok %v duplicated %d lost %d applied %d devices %q failures %q: want not OK, 2 duplicated",
				vr.OK, vr.Duplicated, vr.Lost, vr.Applied, vr.LossDevices, vr.Failures)
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

// TestVerifyClusterHubs verifies through several hubs of a cluster: the
// first is dead (its port closed, as after a SIGKILL), the second answers
// partially (a partition without owner) and with 503s for a while. Every
// request ends at a hub that answers whole, and no partial answer is
// compared; a hub that stays partial past Retry leaves the windows
// unchecked, saying why, and a device no hub can answer is an error.
func TestVerifyClusterHubs(t *testing.T) {
	tr := truthOf("d1", [][2]float64{{1, 1}, {9, 2}, {11, 4}, {25, -1}, {59, 8}, {61, 16}})
	tr.Devices[0].StreamID = "00"
	tr.Windows = []string{"tumbling:10s", "hopping:30s/10s"}
	deadSrv := httptest.NewServer(http.NotFoundHandler())
	dead := deadSrv.URL
	deadSrv.Close()

	var partial, unavailable atomic.Int32
	partial.Store(4)
	unavailable.Store(2)
	live := fakeHub{aggregates: true, partial: &partial, unavailable: &unavailable}.serve(t, tr)
	vr, err := Verify(context.Background(), tr, VerifyOptions{HubURL: dead, HubURLs: []string{live.URL}, Retry: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if !vr.OK || vr.Lost != 0 || vr.Applied != 6 || len(vr.Windows) != 2 || vr.Windows[0].Match != 5 || vr.Windows[1].Match != 9 {
		t.Errorf("dead hub, then a partial one: %+v", vr)
	}
	if n, m := partial.Load(), unavailable.Load(); n >= 0 || m >= 0 {
		t.Errorf("the live hub's partial answers and 503s were not all asked for (%d, %d left)", n, m)
	}

	// A hub that stays partial: the windows are not checked, and the
	// device, answered by 503s only, is an error naming it.
	partial.Store(1 << 30)
	unavailable.Store(1 << 30)
	_, err = Verify(context.Background(), tr, VerifyOptions{HubURL: live.URL, HubURLs: []string{dead}, Retry: 300 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "d1") || !strings.Contains(err.Error(), "503") {
		t.Errorf("only 503s: err %v, want one naming d1 and the 503", err)
	}
	healthy := fakeHub{aggregates: true}.serve(t, tr)
	mux := http.NewServeMux()
	mux.Handle("GET /v1/devices/{id}", proxyTo(t, healthy.URL))
	mux.Handle("GET /v1/aggregates", proxyTo(t, live.URL))
	mixed := httptest.NewServer(mux)
	t.Cleanup(mixed.Close)
	vr, err = Verify(context.Background(), tr, VerifyOptions{HubURL: mixed.URL, Retry: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if w := vr.Windows[0]; vr.OK || w.Available || !strings.Contains(w.Note, "partial answer: partitions [3] missing") || vr.Lost != 0 {
		t.Errorf("always partial: ok %v window %+v: want not OK, windows unchecked with the partial answer as note", vr.OK, w)
	}
}

// proxyTo forwards a request's path and query to base.
func proxyTo(t *testing.T, base string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp, err := http.Get(base + r.URL.RequestURI())
		if err != nil {
			t.Error(err)
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	})
}

// timesTruth is two devices, 100 events each at i+0.5 s (i = 1..100),
// every event sampled for the event-time check.
func timesTruth() *Truth {
	tr := &Truth{Resolution: 10 * time.Second, Metrics: []string{"m"}}
	for _, name := range []string{"d1", "d2"} {
		d := &DeviceTruth{Device: name, StreamID: "s-" + name, Buckets: map[BucketKey]*Agg{}}
		for i := int64(1); i <= 100; i++ {
			ns := i*int64(time.Second) + int64(time.Second)/2
			d.add("m", ns, float64(i), tr.Resolution)
			d.Appended++
			d.Samples = append(d.Samples, TimeSample{Seq: d.Appended, TrueNs: ns})
		}
		tr.Devices = append(tr.Devices, d)
	}
	return tr
}

// hubTimes are the events of tr as a hub that placed event i of each
// device i ms off its true time (early for odd i, late for even) would
// return them, plus events the check must skip: another stream's with
// the same sequence numbers and an unsampled sequence number, far off.
func hubTimes(tr *Truth) map[string][]fakeEvent {
	out := map[string][]fakeEvent{}
	for _, d := range tr.Devices {
		for i, s := range d.Samples {
			off := int64(i+1) * int64(time.Millisecond)
			if i%2 == 0 {
				off = -off
			}
			out[d.Device] = append(out[d.Device], fakeEvent{d.StreamID, s.Seq, s.TrueNs + off},
				fakeEvent{"other", s.Seq, s.TrueNs + int64(time.Hour)/2})
		}
		out[d.Device] = append(out[d.Device], fakeEvent{d.StreamID, 1000, tr.Devices[0].Samples[0].TrueNs + int64(time.Minute)})
	}
	return out
}

func TestVerifyEventTimeError(t *testing.T) {
	tr := timesTruth()
	evs := hubTimes(tr)
	// Absolute errors 1..100 ms, twice: p50 50 ms, p99 99 ms, max 100 ms;
	// the histogram reports bucket upper bounds, within 5%.
	near := func(got, want float64) bool { return got >= want && got <= want*1.05 }
	t.Run("measured across pages", func(t *testing.T) {
		srv := fakeHub{aggregates: true, events: evs, pageSize: 37}.serve(t, tr)
		vr, err := Verify(context.Background(), tr, VerifyOptions{HubURL: srv.URL})
		if err != nil {
			t.Fatal(err)
		}
		te := vr.TimeError
		if !te.Measured || te.Partial || te.Count != 200 || !near(te.P50Ms, 50) || !near(te.P99Ms, 99) || te.MaxMs != 100 {
			t.Errorf("time error %+v: want 200 events measured, p50 50ms, p99 99ms, max 100ms", te)
		}
		if !vr.OK {
			t.Errorf("failures %q", vr.Failures)
		}
	})
	t.Run("sample of devices", func(t *testing.T) {
		srv := fakeHub{aggregates: true, events: evs}.serve(t, tr)
		vr, err := Verify(context.Background(), tr, VerifyOptions{HubURL: srv.URL, MaxTimeDevices: 1})
		if err != nil {
			t.Fatal(err)
		}
		if te := vr.TimeError; !te.Measured || te.Count != 100 {
			t.Errorf("time error %+v: want the first device's 100 events", te)
		}
	})
	t.Run("error after some were measured", func(t *testing.T) {
		srv := fakeHub{aggregates: true, events: evs, eventsStatus: map[string]int{"d2": 500}}.serve(t, tr)
		vr, err := Verify(context.Background(), tr, VerifyOptions{HubURL: srv.URL})
		if err != nil {
			t.Fatal(err)
		}
		te := vr.TimeError
		if !te.Measured || !te.Partial || te.Count != 100 || te.MaxMs != 100 || !strings.Contains(te.Note, "partial") ||
			!strings.Contains(te.Note, "d2") || !strings.Contains(te.Note, "HTTP 500") {
			t.Errorf("time error %+v: want d1's 100 events kept, marked partial, saying d2 failed with HTTP 500", te)
		}
	})
	t.Run("error before any was measured", func(t *testing.T) {
		// A 503 is asked again for Retry (a cluster's partition may find an
		// owner), then reported.
		srv := fakeHub{aggregates: true, events: evs, eventsStatus: map[string]int{"d1": 503}}.serve(t, tr)
		vr, err := Verify(context.Background(), tr, VerifyOptions{HubURL: srv.URL, Retry: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if te := vr.TimeError; te.Measured || te.Partial || te.Count != 0 || !strings.Contains(te.Note, "not measured") || !strings.Contains(te.Note, "HTTP 503") {
			t.Errorf("time error %+v: want not measured, saying why", te)
		}
	})
	t.Run("events not served", func(t *testing.T) {
		srv := fakeHub{aggregates: true}.serve(t, tr)
		vr, err := Verify(context.Background(), tr, VerifyOptions{HubURL: srv.URL})
		if err != nil {
			t.Fatal(err)
		}
		if te := vr.TimeError; te.Measured || !strings.Contains(te.Note, "not available") {
			t.Errorf("time error %+v: want not measured, not available", te)
		}
	})
}
