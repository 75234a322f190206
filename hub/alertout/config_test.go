package alertout

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestParse: good outputs parse with their defaults; every bad one is an
// ErrInvalidConfig naming the output and the key.
func TestParse(t *testing.T) {
	outs, err := Parse([]any{
		map[string]any{"name": "ops", "kind": "webhook", "url": "https://hooks.example.com/a",
			"headers": map[string]any{"Authorization": "Bearer x"}, "timeout": "2s"},
		map[string]any{"name": "bus", "kind": "mqtt", "topic": "edgeflow/alerts", "max_backoff": "1s"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(outs) != 2 || outs[0].Timeout != 2*time.Second || outs[0].Headers["Authorization"] != "Bearer x" ||
		outs[0].MaxBackoff != 30*time.Second || outs[1].Topic != "edgeflow/alerts" || outs[1].MaxBackoff != time.Second {
		t.Fatalf("parsed %+v", outs)
	}
	if outs, err := Parse(nil); err != nil || outs != nil {
		t.Fatalf("nil: %v %v", outs, err)
	}
	for _, c := range []struct {
		raw  any
		want []string
	}{
		{"x", []string{`"alert_outputs"`, "list"}},
		{[]any{"x"}, []string{"alert_outputs[0]", "not a map"}},
		{[]any{map[string]any{"kind": "webhook"}}, []string{`key "name"`, "required"}},
		{[]any{map[string]any{"name": "a", "kind": "smtp"}}, []string{`"a"`, `key "kind"`, "smtp"}},
		{[]any{map[string]any{"name": "a", "kind": "webhook"}}, []string{`"a"`, `key "url"`, "required"}},
		{[]any{map[string]any{"name": "a", "kind": "webhook", "url": "ftp://x"}}, []string{`key "url"`, "ftp://x"}},
		{[]any{map[string]any{"name": "a", "kind": "webhook", "url": "http://x", "topic": "t"}}, []string{`key "topic"`, "unknown"}},
		{[]any{map[string]any{"name": "a", "kind": "webhook", "url": "http://x", "timeout": "-1s"}}, []string{`key "timeout"`}},
		{[]any{map[string]any{"name": "a", "kind": "webhook", "url": "http://x", "headers": map[string]any{"Bad Name": "v"}}}, []string{`key "headers"`, "Bad Name"}},
		{[]any{map[string]any{"name": "a", "kind": "webhook", "url": "http://x", "headers": map[string]any{"X": "a\nb"}}}, []string{`key "headers"`, "line break"}},
		{[]any{map[string]any{"name": "a", "kind": "webhook", "url": "http://x", "headers": map[string]any{"idempotency-key": "k"}}}, []string{`key "headers"`, "set by the output"}},
		{[]any{map[string]any{"name": "b", "kind": "mqtt"}}, []string{`"b"`, `key "topic"`, "required"}},
		{[]any{map[string]any{"name": "b", "kind": "mqtt", "topic": "a/+/c"}}, []string{`key "topic"`, "wildcard"}},
		{[]any{map[string]any{"name": "b", "kind": "mqtt", "topic": "a/#"}}, []string{`key "topic"`, "wildcard"}},
		{[]any{map[string]any{"name": "b", "kind": "mqtt", "topic": "$SYS/x"}}, []string{`key "topic"`, "$"}},
		{[]any{map[string]any{"name": "b", "kind": "mqtt", "topic": "edge/v1/d1/batch"}}, []string{`key "topic"`, "edge/v1/"}},
		{[]any{map[string]any{"name": "b", "kind": "mqtt", "topic": "t", "max_backoff": "soon"}}, []string{`key "max_backoff"`}},
		{[]any{map[string]any{"name": "b", "kind": "mqtt", "topic": "t"}, map[string]any{"name": "b", "kind": "mqtt", "topic": "u"}}, []string{"alert_outputs[1]", `key "name"`, "another"}},
	} {
		_, err := Parse(c.raw)
		if !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%v: err %v, want ErrInvalidConfig", c.raw, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: %q does not say %q", c.raw, err, w)
			}
		}
	}
}
