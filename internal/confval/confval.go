// Package confval converts the raw values of configuration keys (as a YAML
// file, the environment or a flag gives them) strictly, so that a value
// of the wrong kind is an error instead of a silent surprise: a duration
// written without a unit ("5", which time.Duration's int64 nature and
// cast would take as 5 nanoseconds), or a list where one value belongs
// (which would read as an empty string). Errors do not name the key; the
// caller wraps them with it.
package confval

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// Duration converts raw to a duration. It takes a Go duration string
// ("500ms", "5m", "1h30m", surrounding spaces ignored), a time.Duration,
// and zero written as a number (0, "0"), which needs no unit to be read
// one way only. Any other number (5, 1.5, "5") is refused with ErrNoUnit,
// as are lists, maps and booleans.
func Duration(raw any) (time.Duration, error) {
	switch v := raw.(type) {
	case nil:
		return 0, nil
	case time.Duration:
		return v, nil
	case string:
		return parseDuration(v)
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, float32, float64:
		return bareNumber(fmt.Sprint(v))
	}
	if kind := compound(raw); kind != "" {
		return 0, fmt.Errorf("%s, where a duration such as 30s or 5m is expected", kind)
	}
	return 0, fmt.Errorf("%v is not a duration such as 30s or 5m", raw)
}

// parseDuration parses a duration string, telling a missing unit apart.
func parseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if f, err := strconv.ParseFloat(s, 64); err == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
		return bareNumber(s)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration such as 30s or 5m", s)
	}
	return d, nil
}

// bareNumber is a number without a unit: zero, or an error that shows
// how to write it with one.
func bareNumber(s string) (time.Duration, error) {
	if f, err := strconv.ParseFloat(s, 64); err == nil && f == 0 {
		return 0, nil
	}
	return 0, noUnitError(s)
}

// noUnitError is a bare number given as a duration; it is ErrNoUnit.
type noUnitError string

func (n noUnitError) Error() string {
	return fmt.Sprintf("%s has no unit; write a duration such as %ss or %sm", string(n), string(n), string(n))
}

// Is makes errors.Is(err, ErrNoUnit) true.
func (noUnitError) Is(target error) bool { return target == ErrNoUnit }

// durationType is the reflect.Type DurationHook converts to.
var durationType = reflect.TypeFor[time.Duration]()

// DurationHook is a mapstructure decode hook (its DecodeHookFuncType
// signature) that decodes every time.Duration field with Duration, so a
// struct decoded from YAML (viper.Unmarshal) refuses bare numbers as the
// keys read one by one do. Other fields pass through unchanged.
func DurationHook(_ reflect.Type, to reflect.Type, data any) (any, error) {
	if to != durationType {
		return data, nil
	}
	return Duration(data)
}

// compound names the kind of a list or map value, "" for anything else.
func compound(raw any) string {
	if raw == nil {
		return ""
	}
	switch reflect.TypeOf(raw).Kind() {
	case reflect.Slice, reflect.Array:
		return fmt.Sprintf("a list (%v)", raw)
	case reflect.Map:
		return "a map"
	}
	return ""
}

// flagWants describes what a value of each pflag type must be.
var flagWants = map[string]string{
	"string": "a string", "int": "an integer", "int64": "an integer", "uint": "a non-negative integer",
	"bool": "true or false", "float64": "a number", "duration": "a duration such as 30s or 5m",
}

// CheckScalars checks that every key declared as a flag of fs, as get
// returns it, is a single value and not a list or a map (a YAML file can
// give either), naming the key and the type its flag expects. Keys in
// lists may be lists (a list of broker URLs, say).
func CheckScalars(fs *pflag.FlagSet, get func(key string) any, lists ...string) error {
	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		for _, l := range lists {
			if f.Name == l {
				return
			}
		}
		kind := compound(get(f.Name))
		if kind == "" {
			return
		}
		want, ok := flagWants[f.Value.Type()]
		if !ok {
			want = "a single value"
		}
		errs = append(errs, fmt.Errorf("config key %q: %s, where %s is expected", f.Name, kind, want))
	})
	return errors.Join(errs...)
}
