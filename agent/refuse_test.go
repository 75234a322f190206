package agent

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// goodEvents is n NDJSON events the hub accepts, stamped at capture.
func goodEvents(n int, from int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "{\"metric\":\"temp\",\"value\":%d}\n", from+i)
	}
	return b.String()
}

// TestIngestRefusesWhatTheHubRefuses: with a trusted clock, an event the
// hub would refuse (ts 1985, 0001-01-01, invalid UTF-8 in a metric or tag)
// is a 400 naming its line or element and field, counted by reason, and
// nothing of its request is stored; the requests around it are stored.
func TestIngestRefusesWhatTheHubRefuses(t *testing.T) {
	o := testOptions(t)
	o.TrustDeviceClock = true
	a := startAgent(t, o)
	if code, _, raw := a.post(goodEvents(50, 0)); code != 200 {
		t.Fatalf("good request: %d %s", code, raw)
	}
	cases := []struct {
		name, body string
		want       []string // in the error text
	}{
		{"ts 1985", goodEvents(3, 0) + `{"metric":"temp","value":1,"ts":"1985-01-01T00:00:00Z"}` + "\n" + goodEvents(2, 0),
			[]string{"line 4", "ts", "1985-01-01T00:00:00Z", "2000-01-01"}},
		{"ts 0001", `[{"metric":"temp","value":1},{"metric":"temp","value":1,"ts":"0001-01-01T00:00:00Z"}]`,
			[]string{"event 2 of the array", "ts 0001-01-01T00:00:00Z"}},
		{"ts 1985 in ms", `{"metric":"temp","value":1,"ts":473385600000}`, []string{"line 1", "ts"}},
		{"metric not UTF-8", "{\"metric\":\"te\xffmp\",\"value\":1}", []string{"line 1", "metric is not valid UTF-8"}},
		{"tag key not UTF-8", "{\"metric\":\"temp\",\"value\":1,\"tags\":{\"room\":\"a\",\"fl\xc3\":\"2\"}}", []string{"line 1", "tags: key 2 is not valid UTF-8"}},
		{"tag value not UTF-8", "{\"metric\":\"temp\",\"value\":1,\"tags\":{\"room\":\"\xe2\x82\"}}", []string{"line 1", `the value of \"room\" is not valid UTF-8`}},
		{"lone surrogate escape", `{"metric":"te\ud800mp","value":1}`, []string{"metric is not valid UTF-8"}},
		{"lone low surrogate in a tag key", `{"metric":"temp","value":1,"tags":{"\udc00":"x"}}`, []string{"tags: key 1"}},
	}
	for _, c := range cases {
		code, _, raw := a.post(c.body)
		if code != 400 || !strings.Contains(raw, "nothing of this request was stored") {
			t.Errorf("%s: %d %s", c.name, code, raw)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(raw, w) {
				t.Errorf("%s: answer %s lacks %q", c.name, raw, w)
			}
		}
	}
	// A surrogate pair written as escapes is one valid character.
	if code, _, raw := a.post(`{"metric":"temp","value":1,"tags":{"sym":"\ud83d\ude00","a":"\u00e9\\u"}}`); code != 200 {
		t.Fatalf("escaped pair: %d %s", code, raw)
	}
	if code, _, raw := a.post(goodEvents(50, 50)); code != 200 {
		t.Fatalf("good request: %d %s", code, raw)
	}
	evs := storedEvents(t, a.Stream())
	if len(evs) != 101 {
		t.Fatalf("stored %d events, want 101", len(evs))
	}
	if evs[50].Tags[1].Value != "\U0001F600" {
		t.Fatalf("escaped pair stored as %q", evs[50].Tags[1].Value)
	}
	metrics := scrape(t, a)
	for _, m := range []string{`edgeflow_agent_refused_events_total{reason="bad_time",source="http"} 3`,
		`edgeflow_agent_refused_events_total{reason="bad_metric",source="http"} 2`,
		`edgeflow_agent_refused_events_total{reason="bad_tag",source="http"} 3`} {
		if !strings.Contains(metrics, m) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
}

// TestIngestUntrustedClockKeepsOldTimes: with a clock that is not synced,
// the hub keeps any time as UNTRUSTED, so the agent takes a ts of 1985
// (it is never repaired into a time the hub refuses), but still refuses
// 0001-01-01 (outside what a device clock can say).
func TestIngestUntrustedClockKeepsOldTimes(t *testing.T) {
	a := startAgent(t, testOptions(t))
	if code, _, raw := a.post(`{"metric":"temp","value":1,"ts":"1985-01-01T00:00:00Z"}`); code != 200 {
		t.Fatalf("untrusted 1985: %d %s", code, raw)
	}
	if code, _, raw := a.post(`{"metric":"temp","value":1,"ts":"0001-01-01T00:00:00Z"}`); code != 400 || !strings.Contains(raw, "ts 0001-01-01") {
		t.Fatalf("0001: %d %s", code, raw)
	}
}

// TestUDPRefusesLines: a line-protocol line the hub would refuse is
// dropped alone, counted by reason; the datagram's other lines are stored.
func TestUDPRefusesLines(t *testing.T) {
	o := testOptions(t)
	o.TrustDeviceClock = true
	a := startAgent(t, o)
	c, err := net.Dial("udp", a.UDPAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	old := time.Date(1985, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	if _, err := c.Write(fmt.Appendf(nil, "cpu usage=1\ncpu usage=2 %d\nm\xff v=1\ncpu usage=3\n", old)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && a.Status().Ingest.UDPEvents < 2 {
		time.Sleep(10 * time.Millisecond)
	}
	if s := a.Status(); s.Ingest.UDPBadLines != 2 || s.Ingest.UDPEvents != 2 {
		t.Fatalf("status ingest %+v", s.Ingest)
	}
	metrics := scrape(t, a)
	for _, m := range []string{`edgeflow_agent_refused_events_total{reason="bad_time",source="udp"} 1`,
		`edgeflow_agent_refused_events_total{reason="bad_metric",source="udp"} 1`} {
		if !strings.Contains(metrics, m) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
}

// scrape returns the agent's /metrics text.
func scrape(t *testing.T, a *testAgent) string {
	t.Helper()
	resp, err := http.Get(a.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
