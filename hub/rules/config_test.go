package rules

import (
	"errors"
	"testing"
	"time"

	"edgeflow/aggregate"
)

// issueYAML is the threshold rule exactly as the hub's documentation
// shows it.
const issueYAML = `
rules:
  - name: hot
    metric: temp
    window: tumbling:10s
    agg: avg          # any aggregate the engine serves: count, sum, min, max, avg, last, p50, p95, p99
    op: ">"           # >, >=, <, <=, ==, !=
    value: 80
    group_by: [device]
`

func TestParseIssueForm(t *testing.T) {
	rs, err := ParseYAML([]byte(issueYAML))
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 {
		t.Fatalf("%d rules", len(rs))
	}
	r := rs[0]
	want := aggregate.WindowSpec{Kind: aggregate.Tumbling, Size: 10 * time.Second, Slide: 10 * time.Second}
	if r.Name != "hot" || r.Kind != Threshold || r.Metric != "temp" || r.Window != want || r.Agg != "avg" ||
		r.Op != ">" || r.Value != 80 || len(r.GroupBy) != 1 || r.GroupBy[0] != "device" || r.For != 1 || r.Provisional {
		t.Fatalf("parsed %+v", r)
	}
}

func TestParseEveryKind(t *testing.T) {
	rs, err := ParseYAML([]byte(`
rules:
  - {name: hot3, metric: temp, window: "hopping:1m/10s", agg: p95, op: ">=", value: 1.5, for: 3, on: provisional}
  - {name: quiet, kind: absence, metric: temp, after: 5m}
  - {name: gone, kind: offline, after: 2m}
  - {name: door-heat, kind: sequence, first: {metric: door, op: "==", value: 1}, then: {metric: temp, op: ">", value: 30}, within: 5m}
  - {name: any-then, kind: sequence, first: {metric: a}, then: {metric: b}, within: 1s}
  - {name: full, kind: buffer, fill_ratio: 0.8, time_to_full: 10m}
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 6 || rs[0].For != 3 || !rs[0].Provisional || rs[0].Window.Slide != 10*time.Second ||
		rs[1].After != 5*time.Minute || rs[1].GroupBy[0] != "device" || rs[2].Kind != Offline ||
		rs[3].First != (Condition{"door", "==", 1}) || rs[3].Then != (Condition{"temp", ">", 30}) ||
		rs[4].First.Op != "" || rs[5].FillRatio != 0.8 || rs[5].TimeToFull != 10*time.Minute {
		t.Fatalf("parsed %+v", rs)
	}
}

func TestParseErrorsNameRuleAndKey(t *testing.T) {
	cases := []struct{ yaml, rule, key string }{
		{`[{metric: temp}]`, "rules[0]", "name"},
		{`[{name: a, metric: temp, window: tumbling:10s, agg: avg, op: "=>", value: 1}]`, `"a"`, "op"},
		{`[{name: a, metric: temp, window: tumbling:10s, agg: mean, op: ">", value: 1}]`, `"a"`, "agg"},
		{`[{name: a, metric: temp, window: session:10s, agg: avg, op: ">", value: 1}]`, `"a"`, "window"},
		{`[{name: a, metric: temp, window: tumbling:10s, agg: avg, op: ">"}]`, `"a"`, "value"},
		{`[{name: a, metric: temp, window: tumbling:10s, agg: avg, op: ">", value: x}]`, `"a"`, "value"},
		{`[{name: a, metric: temp, window: tumbling:10s, agg: avg, op: ">", value: 1, for: 0}]`, `"a"`, "for"},
		{`[{name: a, metric: temp, window: tumbling:10s, agg: avg, op: ">", value: 1, on: never}]`, `"a"`, "on"},
		{`[{name: a, metric: temp, window: tumbling:10s, agg: avg, op: ">", value: 1, colour: red}]`, `"a"`, "colour"},
		{`[{name: a, metric: temp}]`, `"a"`, "kind"},
		{`[{name: a, kind: nope}]`, `"a"`, "kind"},
		{`[{name: a, kind: absence, after: soon}]`, `"a"`, "after"},
		{`[{name: a, kind: absence, after: -1s}]`, `"a"`, "after"},
		{`[{name: a, kind: sequence, first: {metric: x}, then: {metric: y, value: 3}, within: 1m}]`, `"a"`, "then.op"},
		{`[{name: a, kind: sequence, first: {metric: x, size: 2}, then: {metric: y}, within: 1m}]`, `"a"`, "first.size"},
		{`[{name: a, kind: sequence, first: {metric: x}, then: {metric: y}}]`, `"a"`, "within"},
		{`[{name: a, kind: buffer}]`, `"a"`, "fill_ratio"},
		{`[{name: a, kind: buffer, fill_ratio: 2}]`, `"a"`, "fill_ratio"},
		{`[{name: a, kind: offline, after: 1m}, {name: a, kind: offline, after: 2m}]`, `"a"`, "name"},
		{`[{name: a/b, kind: offline, after: 1m}]`, `"a/b"`, "name"},
		{`{name: a}`, "rules", "rules"},
	}
	for _, c := range cases {
		t.Run(c.rule+"."+c.key, func(t *testing.T) {
			_, err := ParseYAML([]byte("rules: " + c.yaml))
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("err %v, want a *ConfigError", err)
			}
			if ce.Rule != c.rule || ce.Key != c.key {
				t.Fatalf("error names rule %s key %s (%v), want %s %s", ce.Rule, ce.Key, err, c.rule, c.key)
			}
		})
	}
}

// TestParseViperShapes: viper hands over []any of map[string]any with
// ints, floats and strings as the YAML had them.
func TestParseViperShapes(t *testing.T) {
	rs, err := Parse([]any{map[string]any{
		"name": "hot", "metric": "temp", "window": "tumbling:10s", "agg": "avg", "op": ">", "value": "80",
		"group_by": []any{"device", "site"}, "for": 2,
	}})
	if err != nil {
		t.Fatal(err)
	}
	if rs[0].Value != 80 || rs[0].For != 2 || len(rs[0].GroupBy) != 2 {
		t.Fatalf("%+v", rs[0])
	}
	if rs, err := Parse(nil); err != nil || rs != nil {
		t.Fatalf("nil: %v %v", rs, err)
	}
}
