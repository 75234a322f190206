package confval

import (
	"errors"
	"strings"
	"testing"
)

var errTest = errors.New("invalid config")

func TestNamedList(t *testing.T) {
	one := func(i int, item any) (string, string, error) {
		m, ok := item.(map[string]any)
		if !ok {
			return "", "", errTest
		}
		name, _ := m["name"].(string)
		return name, name, nil
	}
	for _, raw := range []any{nil, ""} {
		if got, err := NamedList(raw, "sinks", "sink", 0, errTest, one); err != nil || got != nil {
			t.Fatalf("%#v: %v %v, want no entries", raw, got, err)
		}
	}
	got, err := NamedList([]any{map[string]any{"name": "a"}, map[string]any{"name": "b"}}, "sinks", "sink", 0, errTest, one)
	if err != nil || strings.Join(got, ",") != "a,b" {
		t.Fatalf("two entries: %v %v", got, err)
	}
	for _, tt := range []struct {
		raw  any
		max  int
		want string
	}{
		{"x", 0, `config key "sinks": want a list of sinks`},
		{[]any{map[string]any{"name": "a"}, map[string]any{"name": "a"}}, 0, `sinks[1] "a": key "name": used by another sink`},
		{[]any{map[string]any{"name": "a"}, map[string]any{"name": "b"}}, 1, `config key "sinks": 2 sinks, at most 1`},
		{[]any{1}, 0, "invalid config"},
	} {
		_, err := NamedList(tt.raw, "sinks", "sink", tt.max, errTest, one)
		if !errors.Is(err, errTest) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%#v: %v, want %q", tt.raw, err, tt.want)
		}
	}
}
