package agent

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseJSONEvents(t *testing.T) {
	cases := []struct {
		name    string
		body    string
		metrics []string
		ts      []time.Time
		err     string
	}{
		{name: "array", body: `[{"metric":"a","value":1},{"metric":"b","value":2.5,"tags":{"x":"y"}}]`, metrics: []string{"a", "b"}},
		{name: "ndjson", body: "{\"metric\":\"a\",\"value\":1}\n\n{\"metric\":\"b\",\"value\":2}\n", metrics: []string{"a", "b"}},
		{name: "ndjson crlf no final newline", body: "{\"metric\":\"a\",\"value\":1}\r\n{\"metric\":\"b\",\"value\":2}", metrics: []string{"a", "b"}},
		{name: "ts rfc3339", body: `{"metric":"a","value":1,"ts":"2026-01-02T03:04:05.5Z"}`, metrics: []string{"a"},
			ts: []time.Time{time.Date(2026, 1, 2, 3, 4, 5, 5e8, time.UTC)}},
		{name: "ts unix ms", body: `{"metric":"a","value":1,"ts":1700000000123}`, metrics: []string{"a"}, ts: []time.Time{time.UnixMilli(1700000000123)}},
		{name: "ts null", body: `{"metric":"a","value":1,"ts":null}`, metrics: []string{"a"}, ts: []time.Time{{}}},
		{name: "bad second line", body: "{\"metric\":\"a\",\"value\":1}\n{\"metric\":\"b\"}\n", err: "line 2: agent: bad event: value is missing"},
		{name: "bad array element", body: `[{"metric":"a","value":1},{"metric":"","value":1}]`, err: "event 2 of the array: agent: bad event: metric is empty"},
		{name: "unknown field", body: `{"metric":"a","value":1,"unit":"C"}`, err: `line 1: agent: bad event: json: unknown field "unit"`},
		{name: "bad ts", body: `{"metric":"a","value":1,"ts":"yesterday"}`, err: "not RFC 3339"},
		{name: "ts seconds are too old", body: `{"metric":"a","value":1,"ts":1700000000}`, err: "outside 1971..2200"},
		{name: "value as string", body: `{"metric":"a","value":"1"}`, err: "cannot unmarshal string"},
		{name: "not json", body: "hello", err: "line 1"},
		{name: "two values on a line", body: `{"metric":"a","value":1} {"metric":"b","value":1}`, err: "more than one JSON value"},
		{name: "empty", body: "\n\n", err: "no events"},
		{name: "broken array", body: `[{"metric":"a","value":1}`, err: "not a JSON array"},
		{name: "too many tags", body: `{"metric":"a","value":1,"tags":{` + manyTags(65) + `}}`, err: "65 tags"},
		{name: "long metric", body: `{"metric":"` + strings.Repeat("m", 257) + `","value":1}`, err: "at most 256 bytes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pts, err := parseJSONEvents([]byte(c.body), 100)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) || !errors.Is(err, ErrBadEvent) {
					t.Fatalf("err %v, want one containing %q wrapping ErrBadEvent", err, c.err)
				}
				if pts != nil {
					t.Fatalf("points returned with an error: %v", pts)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(pts) != len(c.metrics) {
				t.Fatalf("got %d points, want %d", len(pts), len(c.metrics))
			}
			for i, m := range c.metrics {
				if pts[i].metric != m {
					t.Errorf("point %d metric %q, want %q", i, pts[i].metric, m)
				}
				if c.ts != nil && !pts[i].ts.Equal(c.ts[i]) {
					t.Errorf("point %d ts %v, want %v", i, pts[i].ts, c.ts[i])
				}
			}
		})
	}
}

func TestParseJSONEventsLimit(t *testing.T) {
	body := strings.Repeat("{\"metric\":\"a\",\"value\":1}\n", 11)
	if _, err := parseJSONEvents([]byte(body), 10); err == nil || !strings.Contains(err.Error(), "more than 10 events") {
		t.Fatalf("err %v", err)
	}
	if _, err := parseJSONEvents([]byte("["+strings.TrimSuffix(strings.Repeat(`{"metric":"a","value":1},`, 11), ",")+"]"), 10); err == nil {
		t.Fatal("11 events in an array accepted with a limit of 10")
	}
}

func manyTags(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"k` + strings.Repeat("x", i) + `":"v"`)
	}
	return b.String()
}

// FuzzParseJSONEvents checks that ingest never panics and accepts only
// events within the wire limits.
func FuzzParseJSONEvents(f *testing.F) {
	for _, s := range []string{`[{"metric":"a","value":1}]`, "{\"metric\":\"a\",\"value\":1,\"ts\":1700000000000}\n{}", `{"metric":"a","value":1,"ts":"2026-01-02T03:04:05Z","tags":{"a":"b"}}`, `[`, `{"value":1e400}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		pts, err := parseJSONEvents(body, 1000)
		if err != nil {
			if pts != nil || !errors.Is(err, ErrBadEvent) {
				t.Fatalf("error %v with %d points, or not wrapping ErrBadEvent", err, len(pts))
			}
			return
		}
		for _, p := range pts {
			if err := checkPoint(&p); err != nil {
				t.Fatalf("accepted a point that fails the checks: %v", err)
			}
		}
	})
}
