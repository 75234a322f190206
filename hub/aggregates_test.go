package hub

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"testing"
	"time"

	"edgeflow/aggregate"
	"edgeflow/hub/hubapi"
	"edgeflow/hub/hublog"
	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// aggTestOptions run the engine with short timeouts: streams idle after
// 2s (ticks every 50ms), partials final for a minute are evicted to
// Badger.
func aggTestOptions(t testing.TB, dir string) Options {
	o := testOptions(t, dir)
	o.TickInterval = 50 * time.Millisecond
	o.Aggregate = &aggregate.Options{IdleTimeout: 2 * time.Second, EvictAfter: time.Minute,
		WatermarkInterval: time.Nanosecond, TagKeys: []string{"room"},
		Windows: []aggregate.WindowConfig{{Name: "1m", Kind: "tumbling", Size: time.Minute},
			{Name: "5m-1m", Kind: "hopping", Size: 5 * time.Minute, Slide: time.Minute}}}
	return o
}

// sentEvent is what a test device sent, for brute-force answers.
type sentEvent struct {
	device string
	t      int64
	value  float64
}

// timedBatch builds a batch whose events have the given times and values
// (metric "temp", NTP-corrected with offset 0).
func timedBatch(device string, stream wire.StreamID, first uint64, times []int64, values []float64) *wirepb.Batch {
	b := &wirepb.Batch{DeviceId: device, StreamId: stream[:], FirstSeq: first, SendTimeNs: time.Now().UnixNano(),
		Clock: &wirepb.ClockEstimate{Method: wirepb.TimeMethod_TIME_METHOD_NTP}}
	for i, ts := range times {
		b.Events = append(b.Events, &wirepb.Event{Metric: "temp", Value: values[i], DeviceTimeNs: ts,
			Tags:   []*wirepb.Tag{{Key: "room", Value: "r1"}, {Key: "noise", Value: fmt.Sprint(i)}},
			MonoNs: int64(first) + int64(i), BootId: "b", Method: wirepb.TimeMethod_TIME_METHOD_NTP})
	}
	return b
}

// sendFleet sends n events per device, one a second of event time from
// base, in batches of 50 taking turns (as a fleet does), and returns what
// it sent.
func sendFleet(t *testing.T, devs []*device, base time.Time, n int) []sentEvent {
	var sent []sentEvent
	for first := 1; first <= n; first += 50 {
		for _, d := range devs {
			var times []int64
			var vals []float64
			for i := first; i < first+50 && i <= n; i++ {
				ts := base.Add(time.Duration(i) * time.Second).UnixNano()
				v := float64((i*7+len(d.id)*13)%101) - 20
				times, vals = append(times, ts), append(vals, v)
				sent = append(sent, sentEvent{d.id, ts, v})
			}
			if a := d.send(timedBatch(d.id, d.stream, uint64(first), times, vals)); a.Status != wirepb.AckStatus_ACK_STATUS_OK {
				t.Fatalf("ack %v", a)
			}
		}
	}
	return sent
}

// bruteWindow is the exact answer for one tumbling window of one device.
type bruteWindow struct {
	count          uint64
	sum, min, max  float64
	values         []float64
	start, deviceW string
}

func brute(sent []sentEvent, size time.Duration) map[string]*bruteWindow {
	out := map[string]*bruteWindow{}
	for _, e := range sent {
		start := time.Unix(0, e.t-e.t%int64(size)).UTC().Format(time.RFC3339Nano)
		k := e.device + "|" + start
		w := out[k]
		if w == nil {
			w = &bruteWindow{min: math.Inf(1), max: math.Inf(-1), start: start, deviceW: e.device}
			out[k] = w
		}
		w.count++
		w.sum += e.value
		w.min, w.max = math.Min(w.min, e.value), math.Max(w.max, e.value)
		w.values = append(w.values, e.value)
	}
	return out
}

// getJSON fetches path from h and decodes it; it returns the status and
// raw body.
func getJSON(t *testing.T, h http.Handler, path string, v any) (int, []byte) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	if v != nil && rec.Code == 200 {
		if err := json.Unmarshal(rec.Body.Bytes(), v); err != nil {
			t.Fatalf("%s: %v: %s", path, err, rec.Body.String())
		}
	}
	return rec.Code, rec.Body.Bytes()
}

func aggPath(metric, window string, from, to time.Time, extra string) string {
	return fmt.Sprintf("/v1/aggregates?metric=%s&window=%s&from=%d&to=%s%s", metric, url.QueryEscape(window),
		from.UnixMilli(), url.QueryEscape(to.Format(time.RFC3339)), extra)
}

// waitCount polls until the 1m windows of every device hold want events
// and are final.
func waitCount(t *testing.T, s *Server, base time.Time, want uint64) {
	t.Helper()
	waitCountFor(t, s, base, want, 15*time.Second)
}

// waitCountFor is waitCount with its own bound.
func waitCountFor(t *testing.T, s *Server, base time.Time, want uint64, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		var r hubapi.AggregatesResponse
		getJSON(t, s.Handler(), aggPath("temp", "1m", base.Add(-time.Hour), base.Add(time.Hour), "&aggs=count"), &r)
		var n uint64
		final := true
		for _, w := range r.Windows {
			n += w.Count
			final = final && w.Final
		}
		if n == want && final {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("engine holds %d events (want %d), all final %v", n, want, final)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkBrute compares /v1/aggregates (tumbling 1m by device) with the
// brute-force answer: exact count, sum, min, max, avg; quantiles within
// the sketch's relative accuracy of a value at their rank.
func checkBrute(t *testing.T, h http.Handler, sent []sentEvent, base time.Time) hubapi.AggregatesResponse {
	t.Helper()
	var r hubapi.AggregatesResponse
	if code, body := getJSON(t, h, aggPath("temp", "tumbling:1m", base.Add(-time.Hour), base.Add(time.Hour), "&group_by=device"), &r); code != 200 {
		t.Fatalf("status %d: %s", code, body)
	}
	want := brute(sent, time.Minute)
	if len(r.Windows) != len(want) {
		t.Fatalf("%d windows, want %d", len(r.Windows), len(want))
	}
	for _, w := range r.Windows {
		b := want[w.Group["device"]+"|"+w.Start]
		if b == nil {
			t.Fatalf("unexpected window %+v", w)
		}
		if w.Count != b.count || *w.Sum != b.sum || *w.Min != b.min || *w.Max != b.max || *w.Avg != b.sum/float64(b.count) {
			t.Fatalf("window %s %s: got count %d sum %v min %v max %v avg %v; want %d %v %v %v",
				w.Group["device"], w.Start, w.Count, *w.Sum, *w.Min, *w.Max, *w.Avg, b.count, b.sum, b.min, b.max)
		}
		slices.Sort(b.values)
		for _, q := range []struct {
			p   float64
			got float64
		}{{0.5, *w.P50}, {0.95, *w.P95}, {0.99, *w.P99}} {
			rank := q.p * float64(len(b.values)-1)
			lo, hi := b.values[int(math.Floor(rank))], b.values[int(math.Ceil(rank))]
			slack := 0.01*math.Max(math.Abs(lo), math.Abs(hi)) + 1e-9
			if q.got < lo-slack || q.got > hi+slack {
				t.Fatalf("window %s %s p%v = %v, want within 1%% of [%v, %v]", w.Group["device"], w.Start, q.p*100, q.got, lo, hi)
			}
		}
	}
	return r
}

// TestAggregatesLateCrashRebuild drives the engine through the hub: three
// devices send five minutes of events from two hours ago; the answers
// equal a brute-force computation; a device back "from offline" sends
// late events into evicted, final windows, which merge in and bump the
// revision; an event beyond late_horizon lands in /v1/late; a crash
// (no final checkpoint) and restart give byte-identical answers, and so
// does a rebuild from the log, whose engine state equals live ingest's.
func TestAggregatesLateCrashRebuild(t *testing.T) {
	dir := t.TempDir()
	s1 := startHub(t, aggTestOptions(t, dir))
	var devs []*device
	for _, id := range []string{"d1", "d22", "d333"} {
		devs = append(devs, newDevice(t, "tcp://"+s1.BrokerAddr(), id))
	}
	base := time.Now().Add(-2 * time.Hour).Truncate(time.Minute)
	sent := sendFleet(t, devs, base, 300)
	waitCount(t, s1, base, uint64(len(sent)))
	r := checkBrute(t, s1.Handler(), sent, base)
	for _, w := range r.Windows {
		if w.Revision != 0 || w.Late != 0 {
			t.Fatalf("on-time window has revision %d late %d", w.Revision, w.Late)
		}
	}
	if st := s1.Engine().Stats(); st.Evicted == 0 {
		t.Fatalf("nothing evicted to the store: %+v", st)
	}
	if err := s1.Checkpoint(); err != nil {
		t.Fatal(err)
	}

	// d1 comes back with 20 events for the third minute and one beyond the horizon.
	d := devs[0]
	var times []int64
	var vals []float64
	for i := 0; i < 20; i++ {
		ts := base.Add(2*time.Minute + time.Duration(i)*time.Second + 500*time.Millisecond).UnixNano()
		times, vals = append(times, ts), append(vals, float64(i))
		sent = append(sent, sentEvent{d.id, ts, float64(i)})
	}
	times, vals = append(times, base.Add(-100*time.Hour).UnixNano()), append(vals, 42)
	if a := d.send(timedBatch(d.id, d.stream, 301, times, vals)); a.Status != wirepb.AckStatus_ACK_STATUS_OK {
		t.Fatalf("ack %v", a)
	}
	waitCount(t, s1, base, uint64(len(sent)))
	r = checkBrute(t, s1.Handler(), sent, base)
	revised := 0
	for _, w := range r.Windows {
		if w.Group["device"] == "d1" && w.StartMs == base.Add(2*time.Minute).UnixMilli() {
			if w.Revision != 1 || w.Late != 20 || !w.Final {
				t.Fatalf("late window: revision %d late %d final %v", w.Revision, w.Late, w.Final)
			}
			revised++
		} else if w.Revision != 0 {
			t.Fatalf("window %v revised", w)
		}
	}
	if revised != 1 {
		t.Fatal("late window missing")
	}
	var late hubapi.LateResponse
	getJSON(t, s1.Handler(), "/v1/late", &late)
	if len(late.Events) != 1 || late.Events[0].Value != 42 || late.Events[0].Device != "d1" {
		t.Fatalf("late log: %+v", late)
	}
	queries := []string{
		aggPath("temp", "tumbling:1m", base.Add(-time.Hour), base.Add(time.Hour), "&group_by=device"),
		aggPath("temp", "5m-1m", base.Add(-time.Hour), base.Add(time.Hour), "&group_by=room"),
		aggPath("temp", "session:30s", base.Add(-time.Hour), base.Add(time.Hour), "&group_by=device"),
		aggPath("temp", "sliding:1m", base, base.Add(10*time.Minute), "&aggs=count,last,p99"),
	}
	answers := func(s *Server) [][]byte {
		var out [][]byte
		for _, q := range queries {
			code, body := getJSON(t, s.Handler(), q, nil)
			if code != 200 {
				t.Fatalf("%s: %d %s", q, code, body)
			}
			out = append(out, body)
		}
		return out
	}
	want := answers(s1)

	// Crash: no final checkpoint; the restart replays after the last one.
	s1.skipFinalCheckpoint = true
	if err := s1.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	s2 := startHub(t, aggTestOptions(t, dir))
	sameAnswers(t, "after crash", want, answers(s2))
	if err := s2.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	// Rebuild with the same configuration: the same engine state.
	before := engineCheckpoint(t, dir)
	o := aggTestOptions(t, dir)
	res, err := Rebuild(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	after := engineCheckpoint(t, dir)
	if res.Generation != 1 || res.Batches == 0 {
		t.Fatalf("rebuild: %+v", res)
	}
	_, b1, _ := splitAggSnapshot(before)
	_, b2, _ := splitAggSnapshot(after)
	if !bytes.Equal(b1, b2) {
		t.Fatalf("rebuilt engine state differs from live ingest's (%d and %d bytes)", len(b1), len(b2))
	}
	s3 := startHub(t, aggTestOptions(t, dir))
	sameAnswers(t, "after rebuild", want, answers(s3))
	if n := countPartialKeys(t, s3, 0); n != 0 {
		t.Fatalf("%d partials of the old generation left", n)
	}
}

func sameAnswers(t *testing.T, when string, want, got [][]byte) {
	t.Helper()
	for i := range want {
		if !bytes.Equal(want[i], got[i]) {
			t.Fatalf("%s: query %d differs:\nbefore %s\nafter  %s", when, i, want[i], got[i])
		}
	}
}

// engineCheckpoint reads the engine's entry of the last checkpoint.
func engineCheckpoint(t *testing.T, dir string) []byte {
	t.Helper()
	st, err := hublog.OpenStore(dir, true, quietLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	_, state, err := st.LoadCheckpoint()
	if err != nil {
		t.Fatal(err)
	}
	var doc stateDoc
	if err := json.Unmarshal(state, &doc); err != nil {
		t.Fatal(err)
	}
	return doc.Consumers[AggregateConsumerName]
}

func countPartialKeys(t *testing.T, s *Server, gen uint64) int {
	n := 0
	var drop []uint64
	_, err := hublog.DropGenerations(s.st.DB, func(g uint64) bool { drop = append(drop, g); return false })
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range drop {
		if g == gen {
			n++
		}
	}
	return n
}

// TestRebuildNewResolution changes the resolution, which a checkpoint
// cannot be restored into: the start fails naming rebuild, and after
// `hubd rebuild` the answers at the new resolution equal brute force.
func TestRebuildNewResolution(t *testing.T) {
	dir := t.TempDir()
	s1 := startHub(t, aggTestOptions(t, dir))
	devs := []*device{newDevice(t, "tcp://"+s1.BrokerAddr(), "r1"), newDevice(t, "tcp://"+s1.BrokerAddr(), "r2")}
	base := time.Now().Add(-3 * time.Hour).Truncate(time.Minute)
	sent := sendFleet(t, devs, base, 200)
	waitCount(t, s1, base, uint64(len(sent)))
	if err := s1.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	o := aggTestOptions(t, dir)
	o.Aggregate.Resolution = 5 * time.Second
	s2, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := s2.Start(context.Background()); err == nil || !bytes.Contains([]byte(err.Error()), []byte("hubd rebuild")) {
		t.Fatalf("start with a new resolution: %v", err)
	}
	_ = s2.Shutdown(context.Background())
	if _, err := Rebuild(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	o = aggTestOptions(t, dir)
	o.Aggregate.Resolution = 5 * time.Second
	s3 := startHub(t, o)
	checkBrute(t, s3.Handler(), sent, base)
	var r hubapi.AggregatesResponse
	if code, body := getJSON(t, s3.Handler(), aggPath("temp", "tumbling:5s", base, base.Add(time.Hour), ""), &r); code != 200 || len(r.Windows) != 41 {
		t.Fatalf("5s windows: %d %d %s", code, len(r.Windows), body)
	}
}

// TestEventsEndpoint reads a device's stored events back in event-time
// order, even when they were sent out of order.
func TestEventsEndpoint(t *testing.T) {
	s := startHub(t, aggTestOptions(t, t.TempDir()))
	d := newDevice(t, "tcp://"+s.BrokerAddr(), "ev1")
	other := newDevice(t, "tcp://"+s.BrokerAddr(), "ev2")
	base := time.Now().Add(-10 * time.Minute).Truncate(time.Second)
	at := func(sec int) int64 { return base.Add(time.Duration(sec) * time.Second).UnixNano() }
	d.send(timedBatch("ev1", d.stream, 1, []int64{at(5), at(1), at(3)}, []float64{5, 1, 3}))
	d.send(timedBatch("ev1", d.stream, 4, []int64{at(2), at(4), at(100)}, []float64{2, 4, 100}))
	other.send(timedBatch("ev2", other.stream, 1, []int64{at(2)}, []float64{-1}))
	r, got := eventValues(t, s, "ev1", base, base.Add(time.Minute))
	if !slices.Equal(got, []float64{1, 2, 3, 4, 5}) || r.Truncated {
		t.Fatalf("events %v truncated %v", got, r.Truncated)
	}
	// Through the event-time index: ev1's two batches, not ev2's or the
	// status entries.
	if r.Scanned != 2 {
		t.Fatalf("scanned %d log entries, want ev1's 2", r.Scanned)
	}
	code, _ := getJSON(t, s.Handler(), fmt.Sprintf("/v1/events?device=ev1&from=%d&to=%d&limit=2&metric=temp", base.UnixMilli(), base.Add(time.Minute).UnixMilli()), &r)
	if code != 200 || len(r.Events) != 2 || !r.Truncated || r.NextFrom != hubapi.RFC3339(time.Unix(0, at(3))) {
		t.Fatalf("limited: %d %+v", code, r)
	}
}

// eventValues asks s's GET /v1/events for device's events in [from, to)
// and returns the answer and the events' values in order.
func eventValues(t *testing.T, s *Server, device string, from, to time.Time) (hubapi.EventsResponse, []float64) {
	t.Helper()
	var r hubapi.EventsResponse
	code, body := getJSON(t, s.Handler(), fmt.Sprintf("/v1/events?device=%s&from=%d&to=%d", device, from.UnixMilli(), to.UnixMilli()), &r)
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	var got []float64
	for _, e := range r.Events {
		got = append(got, e.Value)
	}
	return r, got
}

// TestStreamSSE follows /v1/stream: window updates with the metric's
// results, merged-stream events with ids, and resume with Last-Event-ID.
func TestStreamSSE(t *testing.T) {
	o := aggTestOptions(t, t.TempDir())
	o.StreamHeartbeat = 100 * time.Millisecond
	s := startHub(t, o)
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/v1/stream?metric=temp&window=1m&events=true", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	d := newDevice(t, "tcp://"+s.BrokerAddr(), "sse1")
	base := time.Now().Add(-30 * time.Minute).Truncate(time.Minute)
	d.send(timedBatch("sse1", d.stream, 1, []int64{base.UnixNano(), base.Add(time.Second).UnixNano()}, []float64{1, 2}))
	seen := map[string]bool{}
	buf := make([]byte, 0, 1<<16)
	chunk := make([]byte, 4096)
	for !(seen["final-with-windows"] && seen["event"] && seen["ping"]) {
		n, err := resp.Body.Read(chunk)
		if err != nil {
			t.Fatalf("stream ended (%v); saw %v", err, seen)
		}
		buf = append(buf, chunk[:n]...)
		for {
			i := bytes.Index(buf, []byte("\n\n"))
			if i < 0 {
				break
			}
			msg := string(buf[:i])
			buf = buf[i+2:]
			switch {
			case msg == ": ping":
				seen["ping"] = true
			case bytes.Contains([]byte(msg), []byte("event: event")):
				seen["event"] = true
			case bytes.Contains([]byte(msg), []byte("event: final")) && bytes.Contains([]byte(msg), []byte(`"count":2`)):
				seen["final-with-windows"] = true
			}
		}
	}
	// Resume after the first event: only the second comes again.
	req2, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/v1/stream", nil)
	req2.Header.Set("Last-Event-ID", "0")
	resp2, err := http.DefaultClient.Do(req2)
	if err != nil {
		t.Fatal(err)
	}
	defer resp2.Body.Close()
	var got []byte
	for !bytes.Contains(got, []byte("id: 1\n")) {
		n, err := resp2.Body.Read(chunk)
		if err != nil {
			t.Fatalf("resume: %v: %s", err, got)
		}
		got = append(got, chunk[:n]...)
	}
	if bytes.Contains(got, []byte("id: 0\n")) {
		t.Fatalf("resume sent %s", got)
	}
}

// TestQueryAPIParamErrors checks that every bad parameter is a 400 whose
// JSON names it.
func TestQueryAPIParamErrors(t *testing.T) {
	s := startHub(t, aggTestOptions(t, t.TempDir()))
	h := s.Handler()
	const rng = "&from=2025-06-01T00:00:00Z&to=1748739600000"
	tests := []struct {
		path, param string
	}{
		{"/v1/aggregates?window=1m" + rng, "metric"},
		{"/v1/aggregates?metric=t&window=weekly" + rng, "window"},
		{"/v1/aggregates?metric=t&window=tumbling:7s" + rng, "size"},
		{"/v1/aggregates?metric=t&window=hopping:1m" + rng, "window"},
		{"/v1/aggregates?metric=t&window=hopping:1m/7s" + rng, "slide"},
		{"/v1/aggregates?metric=t&window=session:x" + rng, "window"},
		{"/v1/aggregates?metric=t&to=1748739600000", "from"},
		{"/v1/aggregates?metric=t&from=2025-06-01T00:00:00Z", "to"},
		{"/v1/aggregates?metric=t&from=yesterday&to=1748739600000", "from"},
		{"/v1/aggregates?metric=t&from=2025-06-01T00:00:00Z&to=2025-06-01", "to"},
		{"/v1/aggregates?metric=t&from=1748739600000&to=2025-06-01T00:00:00Z", "to"},
		{"/v1/aggregates?metric=t&from=1&to=2", "from"},
		{"/v1/aggregates?metric=t&aggs=median" + rng, "aggs"},
		{"/v1/aggregates?metric=t&group_by=building" + rng, "group_by"},
		{"/v1/aggregates?metric=t&group_by=device,device" + rng, "group_by"},
		{"/v1/aggregates?metric=t&limit=0" + rng, "limit"},
		{"/v1/aggregates?metric=t&limit=many" + rng, "limit"},
		{"/v1/aggregates?metric=t&limit=100001" + rng, "limit"},
		{"/v1/aggregates?metric=t&colour=red" + rng, "colour"},
		{"/v1/aggregates?metric=t&metric=u" + rng, "metric"},
		{"/v1/events?metric=t" + rng, "device"},
		{"/v1/events?device=d" + rng + "&arrived_within=forever", "arrived_within"},
		{"/v1/events?device=d" + rng + "&arrived_within=1000h", "arrived_within"},
		{"/v1/events?device=d" + rng + "&limit=10001", "limit"},
		{"/v1/events?device=d&from=2025-06-01T00:00:00Z", "to"},
		{"/v1/events?device=d&window=1m" + rng, "window"},
		{"/v1/late?from=-1", "from"},
		{"/v1/late?limit=0", "limit"},
		{"/v1/late?offset=3", "offset"},
		{"/v1/stream?window=weekly", "window"},
		{"/v1/stream?group_by=device", "metric"},
		{"/v1/stream?metric=t&aggs=mode", "aggs"},
		{"/v1/stream?events=maybe", "events"},
		{"/v1/stream?from=x", "from"},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", tt.path, nil))
			var e hubapi.APIError
			body, _ := io.ReadAll(rec.Body)
			if err := json.Unmarshal(body, &e); err != nil || rec.Code != 400 || e.Param != tt.param || e.Error == "" {
				t.Fatalf("got %d %s; want 400 naming %q", rec.Code, body, tt.param)
			}
		})
	}
	// A query over the result cap says which limit and how to narrow it.
	d := newDevice(t, "tcp://"+s.BrokerAddr(), "cap")
	base := time.Now().Add(-time.Hour).Truncate(time.Minute)
	d.send(timedBatch("cap", d.stream, 1, []int64{base.UnixNano(), base.Add(time.Minute).UnixNano()}, []float64{1, 2}))
	waitCount(t, s, base, 2)
	code, body := getJSON(t, h, aggPath("temp", "1m", base, base.Add(time.Hour), "&limit=1"), nil)
	var e hubapi.APIError
	if err := json.Unmarshal(body, &e); err != nil || code != 400 || e.Param != "limit" {
		t.Fatalf("over the limit: %d %s", code, body)
	}
}

// TestQueryHubsMerge: two hubs, each fed the batches of half the devices,
// answer through GET /v1/partials and QueryHubs exactly what one hub fed
// every batch answers through its engine: every aggregate (quantiles
// included), Final and Behind, for tumbling, hopping and session windows
// and several groupings. Bad parameters of /v1/partials are 400s naming
// the parameter.
func TestQueryHubsMerge(t *testing.T) {
	day := time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)
	var hubs [3]*Server
	var urls [3]string
	for i := range hubs {
		o := aggTestOptions(t, t.TempDir())
		o.TickInterval = time.Hour
		hubs[i] = startHub(t, o)
		srv := httptest.NewServer(hubs[i].Handler())
		t.Cleanup(srv.Close)
		urls[i] = srv.URL
	}
	rooms := []string{"r1", "r2", "r3"}
	for round := 0; round < 30; round++ {
		for d := 0; d < 4; d++ {
			dev := fmt.Sprint("dev-", d)
			b := aggregate.Batch{Seq: uint64(round*4 + d + 1), Device: dev, Stream: aggregate.StreamID{byte(d)},
				ServerTime: day.Add(time.Duration(round+1) * time.Minute).UnixNano()}
			for j := 0; j < 20; j++ {
				n := round*20 + j
				b.Events = append(b.Events, aggregate.Event{Seq: uint64(n + 1), Metric: "temp",
					Tags:  []aggregate.Tag{{Key: "room", Value: rooms[(n*7+d)%3]}},
					Value: float64((n*37+d*11)%400-150) / 8, Time: day.Add(time.Duration(round)*time.Minute + time.Duration(j*3+d)*time.Second).UnixNano()})
			}
			for _, h := range []*Server{hubs[2], hubs[d%2]} {
				if err := h.Engine().Apply(&b); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for _, w := range []aggregate.WindowSpec{
		{Kind: aggregate.Tumbling, Size: time.Minute},
		{Kind: aggregate.Hopping, Size: 5 * time.Minute, Slide: time.Minute},
		{Kind: aggregate.Session, Gap: 20 * time.Second},
	} {
		for _, groupBy := range [][]string{nil, {"device"}, {"room"}, {"device", "room"}} {
			q := aggregate.Query{Metric: "temp", Window: w, From: day, To: day.Add(30 * time.Minute), GroupBy: groupBy}
			want, err := hubs[2].Engine().Query(q)
			if err != nil {
				t.Fatal(err)
			}
			got, err := hubapi.QueryHubs(context.Background(), http.DefaultClient, urls[:2], "", q)
			if err != nil {
				t.Fatal(err)
			}
			if len(want) == 0 || fmt.Sprint(want) != fmt.Sprint(got) {
				t.Fatalf("%v group_by %v: merged answer differs:\n%v\n%v", w, groupBy, want, got)
			}
		}
	}
	for query, param := range map[string]string{
		"from=1&to=2":             "metric",
		"metric=temp&to=2":        "from",
		"metric=temp&from=x&to=2": "from",
		"metric=temp&from=1748736000000&to=1748736000000":                   "to",
		"metric=temp&from=1748736000000&to=1748739600000&group_by=nope&x=1": "x",
	} {
		resp, err := http.Get(urls[0] + "/v1/partials?" + query)
		if err != nil {
			t.Fatal(err)
		}
		var e hubapi.APIError
		_ = json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || e.Param != param {
			t.Errorf("%s: status %d, %+v; want 400 naming %s", query, resp.StatusCode, e, param)
		}
	}
}
