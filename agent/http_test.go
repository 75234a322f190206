package agent

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"edgeflow/buffer"
	"edgeflow/wire/wirepb"
)

func TestHTTPIngestJSONAndNDJSON(t *testing.T) {
	a := startAgent(t, testOptions(t))
	code, res, raw := a.post(`[{"metric":"temp","value":21.5,"tags":{"room":"a"}},{"metric":"temp","value":22,"ts":"2026-01-02T03:04:05Z"}]`)
	if code != 200 || res.Accepted != 2 || res.FirstSeq != 1 || res.LastSeq != 2 || res.Durability != "interval" {
		t.Fatalf("array: %d %s", code, raw)
	}
	code, res, raw = a.post("{\"metric\":\"rpm\",\"value\":1}\n{\"metric\":\"rpm\",\"value\":2,\"ts\":1700000000000}\n{\"metric\":\"rpm\",\"value\":3}\n")
	if code != 200 || res.Accepted != 3 || res.FirstSeq != 3 || res.LastSeq != 5 {
		t.Fatalf("ndjson: %d %s", code, raw)
	}
	evs := storedEvents(t, a.Stream())
	if len(evs) != 5 {
		t.Fatalf("stored %d events, want 5", len(evs))
	}
	if evs[0].Metric != "temp" || evs[0].Value != 21.5 || len(evs[0].Tags) != 1 || evs[0].Tags[0].Value != "a" {
		t.Errorf("event 1 = %v", evs[0])
	}
	if got := time.Unix(0, evs[1].DeviceTimeNs).UTC(); !got.Equal(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Errorf("event 2 device time %v", got)
	}
	if got := evs[3].DeviceTimeNs; got != 1700000000000*int64(time.Millisecond) {
		t.Errorf("event 4 device time %d", got)
	}
	for i, ev := range evs {
		if ev.BootId == "" || ev.Method != wirepb.TimeMethod_TIME_METHOD_UNTRUSTED {
			t.Errorf("event %d not stamped as untrusted with a boot id (no time source): %v", i+1, ev)
		}
	}
	// A ts in the past shifts the monotonic time with it (for repair).
	if d := evs[2].MonoNs - evs[1].MonoNs; d >= 0 && evs[1].MonoNs >= 0 {
		t.Errorf("mono of an event stamped at capture (%d) not after one with an old ts (%d)", evs[2].MonoNs, evs[1].MonoNs)
	}
}

func TestHTTPIngestBadLineTakesNothing(t *testing.T) {
	a := startAgent(t, testOptions(t))
	code, _, raw := a.post("{\"metric\":\"a\",\"value\":1}\n{\"metric\":\"a\",\"value\":2}\n{\"metric\":\"a\",\"value\":\"x\"}\n")
	if code != 400 || !strings.Contains(raw, "line 3") || !strings.Contains(raw, "nothing of this request was stored") {
		t.Fatalf("bad line: %d %s", code, raw)
	}
	code, _, raw = a.post(`[{"metric":"a","value":1},{"value":2}]`)
	if code != 400 || !strings.Contains(raw, "event 2 of the array") || !strings.Contains(raw, "metric is empty") {
		t.Fatalf("bad element: %d %s", code, raw)
	}
	for _, body := range []string{"", "[]", "   \n"} {
		if code, _, raw := a.post(body); code != 400 {
			t.Errorf("empty body %q: %d %s", body, code, raw)
		}
	}
	if st := a.Stream().Stats(); st.Next != 1 {
		t.Fatalf("bad requests stored something: next seq %d", st.Next)
	}
	s := a.Status()
	if s.Ingest.HTTPRejected != 5 || s.Ingest.HTTPEvents != 0 {
		t.Errorf("status ingest %+v", s.Ingest)
	}
}

func TestHTTPIngestBodyBound(t *testing.T) {
	o := testOptions(t)
	o.MaxBodyBytes = 4 << 10
	a := startAgent(t, o)
	body := strings.Repeat("{\"metric\":\"a\",\"value\":1}\n", 400)
	code, _, raw := a.post(body)
	if code != http.StatusRequestEntityTooLarge || !strings.Contains(raw, "4096 bytes") {
		t.Fatalf("oversized body: %d %s", code, raw)
	}
	if a.Stream().Stats().Next != 1 {
		t.Fatal("an oversized body stored something")
	}
}

// TestHTTPIngestWaitsForSync shows that an answer in interval durability
// comes after the group fsync: three requests in a row each wait for the
// next sync, so they take at least two sync intervals.
func TestHTTPIngestWaitsForSync(t *testing.T) {
	o := testOptions(t)
	o.Buffer.SyncInterval = 400 * time.Millisecond
	a := startAgent(t, o)
	start := time.Now()
	for range 3 {
		if code, _, raw := a.post(`{"metric":"a","value":1}`); code != 200 {
			t.Fatalf("%d %s", code, raw)
		}
	}
	if el := time.Since(start); el < 750*time.Millisecond {
		t.Fatalf("3 requests answered in %v: they did not wait for the 400ms sync", el)
	}
	// With durability none the same requests do not wait.
	o = testOptions(t)
	o.Buffer = buffer.Options{Durability: buffer.DurabilityNone, SyncInterval: 400 * time.Millisecond}
	b := startAgent(t, o)
	start = time.Now()
	for range 3 {
		if code, res, raw := b.post(`{"metric":"a","value":1}`); code != 200 || res.Durability != "none" {
			t.Fatalf("%d %s", code, raw)
		}
	}
	if el := time.Since(start); el > 700*time.Millisecond {
		t.Errorf("durability none: 3 requests took %v", el)
	}
}

// TestRestartKeepsEvents stops an agent whose hub is unreachable and opens
// the same directory again: the events and the sequence go on.
func TestRestartKeepsEvents(t *testing.T) {
	o := testOptions(t)
	a := startAgent(t, o)
	if code, _, raw := a.post(`[{"metric":"a","value":1},{"metric":"a","value":2}]`); code != 200 {
		t.Fatalf("%d %s", code, raw)
	}
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	b := startAgent(t, o)
	code, res, raw := b.post(`{"metric":"a","value":3}`)
	if code != 200 || res.FirstSeq != 3 {
		t.Fatalf("after restart: %d %s", code, raw)
	}
	if n := len(storedEvents(t, b.Stream())); n != 3 {
		t.Fatalf("%d events after restart, want 3", n)
	}
}

func TestStatusAndMetrics(t *testing.T) {
	a := startAgent(t, testOptions(t))
	a.post(`{"metric":"a","value":1}`)
	resp, err := http.Get(a.url + "/v1/status")
	if err != nil {
		t.Fatal(err)
	}
	var s Status
	err = json.NewDecoder(resp.Body).Decode(&s)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if s.DeviceID != "dev-test" || s.Buffer.Depth != 1 || s.Buffer.Oldest.IsZero() || s.Clock.Method != "TIME_METHOD_UNTRUSTED" ||
		s.Link.State == "" || s.Link.Backlog.Events != 1 || len(s.StreamID) != 32 {
		t.Errorf("status %+v", s)
	}
	resp, err = http.Get(a.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, m := range []string{`edgeflow_agent_ingested_events_total{source="http"} 1`, "edgeflow_buffer_", "edgeflow_uplink_"} {
		if !strings.Contains(string(body), m) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
}

func TestUDPLineProtocol(t *testing.T) {
	a := startAgent(t, testOptions(t))
	c, err := net.Dial("udp", a.UDPAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("cpu,host=a usage=0.5,idle=3i\nnot a line\nmem value=7 1700000000000000000\n")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	// UDP appends do not wait for the sync; the buffer shows records to
	// readers once they are durable.
	for time.Now().Before(deadline) {
		if recs, _ := a.Stream().ReadFrom(1, 10, 1<<20); len(recs) >= 3 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	evs := storedEvents(t, a.Stream())
	if len(evs) != 3 || evs[0].Metric != "cpu.usage" || evs[1].Metric != "cpu.idle" || evs[2].Metric != "mem" ||
		evs[2].DeviceTimeNs != 1700000000000000000 {
		t.Fatalf("stored %v", evs)
	}
	// The listener counts a datagram's events once its append returns,
	// which may be after a reader already sees them.
	s := a.Status()
	for time.Now().Before(deadline) && s.Ingest.UDPEvents < 3 {
		time.Sleep(10 * time.Millisecond)
		s = a.Status()
	}
	if s.Ingest.UDPBadLines != 1 || s.Ingest.UDPEvents != 3 {
		t.Errorf("status ingest %+v", s.Ingest)
	}
}
