package confval

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cast"
)

// ListSpec describes a config section that is a list of named maps, each
// of a kind with its own keys (a hub's `sinks:` or `alert_outputs:`).
type ListSpec struct {
	Key     string              // the section's config key, e.g. "sinks"
	Item    string              // one entry in errors, e.g. "sink" ("used by another sink")
	Kind    string              // what a kind names, with its article: "a sink", "an alert output"
	Among   string              // what names are unique among: "sinks", "alert outputs"
	MapKeys string              // the keys an entry that is not a map is told about
	Kinds   string              // the valid kinds, as the errors list them
	Keys    map[string][]string // each kind's keys; "" the keys every kind takes
	Max     int                 // the most entries; 0: no bound
	Invalid error               // the caller's sentinel every error wraps
}

// Entry is one entry of a list, its name and kind checked and every key
// known for its kind: its map, and Bad for the errors that name it.
type Entry struct {
	Index      int // its place in the list
	M          map[string]any
	Name, Kind string
	label      string
	invalid    error
}

// Bad is an error naming the entry and key.
func (e Entry) Bad(key, format string, a ...any) error {
	return fmt.Errorf("%w: %s: key %q: %s", e.invalid, e.label, key, fmt.Sprintf(format, a...))
}

// StringField is one string key of an entry and where its value goes.
type StringField struct {
	Key string
	Dst *string
}

// Strings sets each field present in the entry, in order; a value that is
// not a string is an error naming its key.
func (e Entry) Strings(fields ...StringField) error {
	for _, f := range fields {
		if v, ok := e.M[f.Key]; ok {
			s, err := cast.ToStringE(v)
			if err != nil {
				return e.Bad(f.Key, "not a string")
			}
			*f.Dst = s
		}
	}
	return nil
}

// NamedList reads the section as viper or a YAML decoder returns it: nil
// or "" is no entries. Each entry must be a map with a name unique in the
// list, a kind of spec.Keys and only that kind's keys (checked in key
// order, so the error is always the same); one reads the rest. The first
// error stops the read; every error wraps spec.Invalid and names the key
// and the entry by index and name.
func NamedList[T any](raw any, spec ListSpec, one func(Entry) (T, error)) ([]T, error) {
	if raw == nil {
		return nil, nil
	}
	if s, ok := raw.(string); ok && s == "" {
		return nil, nil
	}
	list, ok := raw.([]any)
	if !ok {
		return nil, fmt.Errorf("%w: config key %q: want a list of %ss (each a map with name, kind, ...)", spec.Invalid, spec.Key, spec.Item)
	}
	if spec.Max > 0 && len(list) > spec.Max {
		return nil, fmt.Errorf("%w: config key %q: %d %ss, at most %d", spec.Invalid, spec.Key, len(list), spec.Item, spec.Max)
	}
	out := make([]T, 0, len(list))
	seen := map[string]bool{}
	for i, item := range list {
		e, err := spec.entry(i, item)
		if err != nil {
			return nil, err
		}
		if seen[e.Name] {
			return nil, e.Bad("name", "used by another %s", spec.Item)
		}
		seen[e.Name] = true
		c, err := one(e)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// entry checks entry i's map, name, kind and keys.
func (spec ListSpec) entry(i int, item any) (Entry, error) {
	m, err := cast.ToStringMapE(item)
	if err != nil {
		return Entry{}, fmt.Errorf("%w: %s[%d]: not a map of keys (%s)", spec.Invalid, spec.Key, i, spec.MapKeys)
	}
	e := Entry{Index: i, M: m, Name: cast.ToString(m["name"]), Kind: cast.ToString(m["kind"]), invalid: spec.Invalid}
	e.label = fmt.Sprintf("%s[%d] %q", spec.Key, i, e.Name)
	if e.Name == "" {
		return e, e.Bad("name", "is required (a name unique among the %s)", spec.Among)
	}
	allowed, ok := spec.Keys[e.Kind]
	if !ok || e.Kind == "" {
		return e, e.Bad("kind", "%q is not %s kind (kinds: %s)", e.Kind, spec.Kind, spec.Kinds)
	}
	allowed = slices.Concat(spec.Keys[""], allowed)
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if !slices.Contains(allowed, k) {
			return e, e.Bad(k, "unknown for kind %s (keys: %s)", e.Kind, strings.Join(allowed, ", "))
		}
	}
	return e, nil
}
