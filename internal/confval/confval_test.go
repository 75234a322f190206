package confval

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func TestDuration(t *testing.T) {
	ok := []struct {
		raw  any
		want time.Duration
	}{
		{"5m", 5 * time.Minute}, {" 30s ", 30 * time.Second}, {"1h30m", 90 * time.Minute}, {"-1s", -time.Second},
		{"0", 0}, {0, 0}, {0.0, 0}, {"0s", 0}, {nil, 0}, {2 * time.Second, 2 * time.Second},
	}
	for _, c := range ok {
		if got, err := Duration(c.raw); err != nil || got != c.want {
			t.Errorf("Duration(%#v) = %v, %v; want %v", c.raw, got, err, c.want)
		}
	}
	noUnit := []any{5, int64(168), uint8(2), 1.5, "5", " 168 ", "1.5", "-3", "+2"}
	for _, raw := range noUnit {
		_, err := Duration(raw)
		if !errors.Is(err, ErrNoUnit) || !strings.Contains(err.Error(), "has no unit") {
			t.Errorf("Duration(%#v): %v, want ErrNoUnit", raw, err)
		}
	}
	if _, err := Duration(5); err == nil || err.Error() != "5 has no unit; write a duration such as 5s or 5m" {
		t.Errorf("message: %v", err)
	}
	bad := map[any]string{
		"soon": `"soon" is not a duration`, "inf": `"inf" is not a duration`, true: "true is not a duration",
		"": `"" is not a duration`,
	}
	for raw, want := range bad {
		if _, err := Duration(raw); err == nil || errors.Is(err, ErrNoUnit) || !strings.Contains(err.Error(), want) {
			t.Errorf("Duration(%#v): %v, want %q", raw, err, want)
		}
	}
	if _, err := Duration([]any{1, 2}); err == nil || !strings.Contains(err.Error(), "a list ([1 2]), where a duration") {
		t.Errorf("list: %v", err)
	}
	if _, err := Duration(map[string]any{"a": 1}); err == nil || !strings.Contains(err.Error(), "a map, where a duration") {
		t.Errorf("map: %v", err)
	}
}

func TestDurationHook(t *testing.T) {
	dt := reflect.TypeFor[time.Duration]()
	if v, err := DurationHook(reflect.TypeFor[string](), dt, "2s"); err != nil || v != 2*time.Second {
		t.Errorf("hook 2s: %v %v", v, err)
	}
	if _, err := DurationHook(reflect.TypeFor[int](), dt, 5); !errors.Is(err, ErrNoUnit) {
		t.Errorf("hook 5: %v", err)
	}
	// Other targets pass through, numbers included.
	if v, err := DurationHook(reflect.TypeFor[int](), reflect.TypeFor[int64](), 5); err != nil || v != 5 {
		t.Errorf("hook int64: %v %v", v, err)
	}
}

func TestCheckScalars(t *testing.T) {
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	fs.String("data-dir", "d", "")
	fs.Int("workers", 0, "")
	fs.String("urls", "", "")
	vals := map[string]any{"data-dir": []any{1, 2}, "workers": map[string]any{"a": 1}, "urls": []any{"a", "b"}}
	err := CheckScalars(fs, func(k string) any { return vals[k] }, "urls")
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	for _, want := range []string{`config key "data-dir": a list ([1 2]), where a string is expected`,
		`config key "workers": a map, where an integer is expected`} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q lacks %q", msg, want)
		}
	}
	if strings.Contains(msg, "urls") {
		t.Errorf("a key allowed to be a list reported: %q", msg)
	}
	vals = map[string]any{"data-dir": "/x", "workers": 3}
	if err := CheckScalars(fs, func(k string) any { return vals[k] }); err != nil {
		t.Errorf("scalars: %v", err)
	}
}
