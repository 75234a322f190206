package confval

import (
	"errors"
	"strings"
	"testing"
)

var errTest = errors.New("invalid config")

var testSpec = ListSpec{Key: "sinks", Item: "sink", Kind: "a sink", Among: "sinks", MapKeys: "name, kind, ...",
	Kinds: "pg, nats", Keys: map[string][]string{"": {"name", "kind"}, "pg": {"dsn"}, "nats": {"url"}}, Invalid: errTest}

func TestNamedList(t *testing.T) {
	one := func(e Entry) (string, error) {
		var dsn string
		if err := e.Strings(StringField{Key: "dsn", Dst: &dsn}); err != nil {
			return "", err
		}
		return e.Name + "=" + e.Kind + dsn, nil
	}
	for _, raw := range []any{nil, ""} {
		if got, err := NamedList(raw, testSpec, one); err != nil || got != nil {
			t.Fatalf("%#v: %v %v, want no entries", raw, got, err)
		}
	}
	got, err := NamedList([]any{map[string]any{"name": "a", "kind": "pg", "dsn": "x"}, map[string]any{"name": "b", "kind": "nats"}}, testSpec, one)
	if err != nil || strings.Join(got, ",") != "a=pgx,b=nats" {
		t.Fatalf("two entries: %v %v", got, err)
	}
	two := []any{map[string]any{"name": "a", "kind": "pg"}, map[string]any{"name": "b", "kind": "pg"}}
	for _, tt := range []struct {
		raw  any
		max  int
		want string
	}{
		{"x", 0, `config key "sinks": want a list of sinks`},
		{[]any{map[string]any{"name": "a", "kind": "pg"}, map[string]any{"name": "a", "kind": "pg"}}, 0, `sinks[1] "a": key "name": used by another sink`},
		{two, 1, `config key "sinks": 2 sinks, at most 1`},
		{[]any{1}, 0, `sinks[0]: not a map of keys (name, kind, ...)`},
		{[]any{map[string]any{"kind": "pg"}}, 0, `sinks[0] "": key "name": is required (a name unique among the sinks)`},
		{[]any{map[string]any{"name": "a", "kind": "x"}}, 0, `key "kind": "x" is not a sink kind (kinds: pg, nats)`},
		{[]any{map[string]any{"name": "a", "kind": "pg", "zz": 1, "url": "u"}}, 0, `key "url": unknown for kind pg (keys: name, kind, dsn)`},
		{[]any{map[string]any{"name": "a", "kind": "pg", "dsn": []int{1}}}, 0, `key "dsn": not a string`},
	} {
		spec := testSpec
		spec.Max = tt.max
		_, err := NamedList(tt.raw, spec, one)
		if !errors.Is(err, errTest) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%#v: %v, want %q", tt.raw, err, tt.want)
		}
	}
}
