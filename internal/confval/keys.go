package confval

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cast"
	"github.com/spf13/pflag"

	"edgeflow/internal/bytesize"
)

// Keys reads configuration keys one by one and gathers an error for every
// bad one, so that a start-up names all the keys to fix at once. Every
// error names its key the same way in every binary: config key "name": why
// (or flag --name: why, for keys that only flags and the environment set).
type Keys struct {
	// Get returns a key's raw value as the file, the environment or a flag
	// gave it (viper's Get).
	Get func(key string) any
	// Flags names keys as flags (--name) in errors instead of config keys.
	Flags bool

	errs []error
}

// Fail records an error about key.
func (k *Keys) Fail(key, format string, a ...any) {
	k.errs = append(k.errs, k.Errorf(key, format, a...))
}

// Errorf returns an error about key, worded as Fail words it.
func (k *Keys) Errorf(key, format string, a ...any) error {
	if k.Flags {
		return fmt.Errorf("flag --%s: %s", key, fmt.Sprintf(format, a...))
	}
	return fmt.Errorf("config key %q: %s", key, fmt.Sprintf(format, a...))
}

// Add records an error that already names its key; nil is ignored.
func (k *Keys) Add(err error) {
	if err != nil {
		k.errs = append(k.errs, err)
	}
}

// Err joins the errors recorded so far; nil when there are none.
func (k *Keys) Err() error { return errors.Join(k.errs...) }

// String returns the key's value as a string, surrounding spaces removed.
func (k *Keys) String(key string) string { return strings.TrimSpace(cast.ToString(k.Get(key))) }

// Duration returns the key's duration (see Duration: a bare number other
// than 0 is refused). A negative one is refused, and so is 0 unless zeroOK.
func (k *Keys) Duration(key string, zeroOK bool) time.Duration {
	d, err := Duration(k.Get(key))
	switch {
	case err != nil:
		k.Fail(key, "%v", err)
	case d < 0 || (d == 0 && !zeroOK):
		if zeroOK {
			k.Fail(key, "%v is not a duration such as 30s or 5m, or 0", d)
		} else {
			k.Fail(key, "%v is not a positive duration such as 30s or 5m", d)
		}
	}
	return d
}

// Int returns the key's integer, refusing one below lowest.
func (k *Keys) Int(key string, lowest int) int {
	n, err := cast.ToIntE(k.Get(key))
	if err != nil || n < lowest {
		switch lowest {
		case 0:
			k.Fail(key, "%q is not a non-negative integer", k.String(key))
		case 1:
			k.Fail(key, "%q is not a positive integer", k.String(key))
		default:
			k.Fail(key, "%q is not an integer of at least %d", k.String(key), lowest)
		}
	}
	return n
}

// Float returns the key's number, refusing a negative one.
func (k *Keys) Float(key string) float64 {
	f, err := cast.ToFloat64E(k.Get(key))
	if err != nil || f < 0 {
		k.Fail(key, "%q is not a non-negative number", k.String(key))
	}
	return f
}

// Size returns the key's byte size (e.g. 256MiB; see bytesize.Parse).
func (k *Keys) Size(key string) int64 {
	n, err := bytesize.Parse(k.String(key))
	if err != nil {
		k.Fail(key, "%v", err)
	}
	return n
}

// Bool returns the key's boolean.
func (k *Keys) Bool(key string) bool {
	b, err := cast.ToBoolE(k.Get(key))
	if err != nil {
		k.Fail(key, "%q is not true or false", k.String(key))
	}
	return b
}

// OneOf returns the key's value, refusing one that is not in allowed.
func (k *Keys) OneOf(key string, allowed ...string) string {
	s := k.String(key)
	if !slices.Contains(allowed, s) {
		k.Fail(key, "%q: want %s", s, strings.Join(allowed, ", "))
	}
	return s
}

// List returns the key's items: a comma-separated string (a flag, the
// environment) or a YAML list, each item trimmed, empty items dropped.
func (k *Keys) List(key string) []string {
	var items []string
	switch val := k.Get(key).(type) {
	case []any:
		for _, x := range val {
			items = append(items, cast.ToString(x))
		}
	case []string:
		items = val
	default:
		items = strings.Split(cast.ToString(val), ",")
	}
	var out []string
	for _, s := range items {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// LogLevel returns the key's log level: debug, info, warn or error.
func (k *Keys) LogLevel(key string) slog.Level {
	var l slog.Level
	if err := l.UnmarshalText([]byte(k.String(key))); err != nil {
		k.Fail(key, "%q is not debug, info, warn or error", k.String(key))
	}
	return l
}

// File returns the key's path and, when it is set, checks that the file
// exists now, so that a typo fails at start and not at first use.
func (k *Keys) File(key string) string {
	f := k.String(key)
	if f != "" {
		if _, err := os.Stat(f); err != nil {
			k.Fail(key, "%v", err)
		}
	}
	return f
}

// CheckFileKeys checks the keys a config file set (keys, with get reading
// their values): every key must hold one value where its flag takes one
// (see CheckScalars; lists names the flags that take lists), and must be
// a flag of fs or a key that known accepts (known may be nil). A typo
// would otherwise be ignored silently.
func CheckFileKeys(fs *pflag.FlagSet, keys []string, get func(key string) any, known func(key string) bool, lists ...string) error {
	if err := CheckScalars(fs, get, lists...); err != nil {
		return err
	}
	for _, key := range keys {
		if fs.Lookup(key) == nil && (known == nil || !known(key)) {
			return fmt.Errorf("config key %q: unknown (keys are the flag names, e.g. data-dir)", key)
		}
	}
	return nil
}
