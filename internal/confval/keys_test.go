package confval

import (
	"log/slog"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func TestKeysRead(t *testing.T) {
	vals := map[string]any{
		"d": "5m", "z": "0", "n": 3, "s": " x ", "size": "2KiB", "b": "true", "f": 1.5,
		"one": "b", "list": []any{" a", "", "b "}, "csv": "a, ,b", "level": "warn",
	}
	k := &Keys{Get: func(key string) any { return vals[key] }}
	if got := k.Duration("d", false); got != 5*time.Minute {
		t.Errorf("Duration = %v", got)
	}
	if got := k.Duration("z", true); got != 0 {
		t.Errorf("Duration of 0 = %v", got)
	}
	if got := k.Int("n", 1); got != 3 {
		t.Errorf("Int = %d", got)
	}
	if got := k.String("s"); got != "x" {
		t.Errorf("String = %q", got)
	}
	if got := k.Size("size"); got != 2048 {
		t.Errorf("Size = %d", got)
	}
	if !k.Bool("b") || k.Float("f") != 1.5 || k.OneOf("one", "a", "b") != "b" || k.LogLevel("level") != slog.LevelWarn {
		t.Error("Bool, Float, OneOf or LogLevel misread")
	}
	for _, key := range []string{"list", "csv"} {
		if got := k.List(key); !reflect.DeepEqual(got, []string{"a", "b"}) {
			t.Errorf("List(%s) = %q", key, got)
		}
	}
	if err := k.Err(); err != nil {
		t.Fatalf("good values: %v", err)
	}
}

func TestKeysErrorsNameTheKey(t *testing.T) {
	vals := map[string]any{
		"bare": "5", "neg": "-1s", "zero": "0", "int": "x", "neg-int": -2, "size": "lots", "bool": "maybe",
		"float": -1, "one": "c", "level": "loud", "file": filepath.Join(t.TempDir(), "missing.pem"),
	}
	k := &Keys{Get: func(key string) any { return vals[key] }}
	k.Duration("bare", false)
	k.Duration("neg", true)
	k.Duration("zero", false)
	k.Int("int", 0)
	k.Int("neg-int", 1)
	k.Size("size")
	k.Bool("bool")
	k.Float("float")
	k.OneOf("one", "a", "b")
	k.LogLevel("level")
	k.File("file")
	k.File("unset") // an unset file key is no error
	err := k.Err()
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		`config key "bare": 5 has no unit`,
		`config key "neg": -1s is not a duration such as 30s or 5m, or 0`,
		`config key "zero": 0s is not a positive duration`,
		`config key "int": "x" is not a non-negative integer`,
		`config key "neg-int": "-2" is not a positive integer`,
		`config key "size": `,
		`config key "bool": "maybe" is not true or false`,
		`config key "float": "-1" is not a non-negative number`,
		`config key "one": "c": want a, b`,
		`config key "level": "loud" is not debug, info, warn or error`,
		`config key "file": stat `,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if n := strings.Count(err.Error(), "\n") + 1; n != 11 {
		t.Errorf("%d errors, want one per bad key (11):\n%v", n, err)
	}
	f := &Keys{Get: func(string) any { return "5" }, Flags: true}
	f.Duration("probe-every", true)
	if err := f.Err(); err == nil || !strings.HasPrefix(err.Error(), "flag --probe-every: 5 has no unit") {
		t.Fatalf("flag key: %v", err)
	}
}

func TestCheckFileKeys(t *testing.T) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	fs.String("data-dir", "", "")
	fs.String("brokers", "", "")
	vals := map[string]any{"data-dir": "d", "brokers": []any{"a", "b"}, "section.key": 1}
	get := func(key string) any { return vals[key] }
	section := func(key string) bool { return strings.HasPrefix(key, "section.") }
	if err := CheckFileKeys(fs, []string{"data-dir", "brokers", "section.key"}, get, section, "brokers"); err != nil {
		t.Fatalf("known keys: %v", err)
	}
	err := CheckFileKeys(fs, []string{"data-dir", "data_dir"}, get, section)
	if err == nil || !strings.Contains(err.Error(), `config key "brokers": a list`) {
		t.Fatalf("a list for a single-value key: %v", err)
	}
	err = CheckFileKeys(fs, []string{"data-dir", "data_dir"}, get, nil, "brokers")
	if err == nil || err.Error() != `config key "data_dir": unknown (keys are the flag names, e.g. data-dir)` {
		t.Fatalf("unknown key: %v", err)
	}
}
