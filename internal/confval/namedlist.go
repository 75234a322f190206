package confval

import "fmt"

// NamedList reads a config section that is a list of named maps (a hub's
// `sinks:` or `alert_outputs:`) as viper or a YAML decoder returns it:
// nil or "" is no entries. one reads entry i and returns it with its
// name; the first error stops the read. Errors wrap invalid (the caller's
// sentinel) and name the key, and the entry by index and name: key is the
// section's config key, what one entry ("sink", "output"), max the most
// entries (0: no bound).
func NamedList[T any](raw any, key, what string, max int, invalid error, one func(i int, item any) (T, string, error)) ([]T, error) {
	if raw == nil {
		return nil, nil
	}
	if s, ok := raw.(string); ok && s == "" {
		return nil, nil
	}
	list, ok := raw.([]any)
	if !ok {
		return nil, fmt.Errorf("%w: config key %q: want a list of %ss (each a map with name, kind, ...)", invalid, key, what)
	}
	if max > 0 && len(list) > max {
		return nil, fmt.Errorf("%w: config key %q: %d %ss, at most %d", invalid, key, len(list), what, max)
	}
	out := make([]T, 0, len(list))
	seen := map[string]bool{}
	for i, item := range list {
		c, name, err := one(i, item)
		if err != nil {
			return nil, err
		}
		if seen[name] {
			return nil, fmt.Errorf("%w: %s[%d] %q: key \"name\": used by another %s", invalid, key, i, name, what)
		}
		seen[name] = true
		out = append(out, c)
	}
	return out, nil
}
