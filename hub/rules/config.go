package rules

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"edgeflow/aggregate"
)

// Kind is the kind of a rule.
type Kind string

// Rule kinds.
const (
	// Threshold compares a window aggregate with a value.
	Threshold Kind = "threshold"
	// Absence fires when a group sends no events of a metric for a
	// duration of event time.
	Absence Kind = "absence"
	// Offline fires when a device's connection status has been offline for
	// a duration of processing time.
	Offline Kind = "offline"
	// Sequence fires when an event matching First is followed by one
	// matching Then for the same device within a duration of event time.
	Sequence Kind = "sequence"
	// Buffer fires when an agent's buffer is nearly full or filling fast.
	Buffer Kind = "buffer"
)

// Op is a comparison operator.
type Op string

// Compare reports whether x op v holds.
func (o Op) Compare(x, v float64) bool {
	switch o {
	case ">":
		return x > v
	case ">=":
		return x >= v
	case "<":
		return x < v
	case "<=":
		return x <= v
	case "==":
		return x == v
	case "!=":
		return x != v
	}
	return false
}

var ops = []Op{">", ">=", "<", "<=", "==", "!="}

// aggNames are the aggregates a threshold rule may compare; the engine
// serves all of them.
var aggNames = []string{"count", "sum", "min", "max", "avg", "last", "p50", "p95", "p99"}

// Condition selects events for a sequence rule: events of Metric whose
// value satisfies Op Value (any value when Op is empty).
type Condition struct {
	Metric string
	Op     Op
	Value  float64
}

// Match reports whether an event of metric with value v satisfies c.
func (c Condition) Match(metric string, v float64) bool {
	return metric == c.Metric && (c.Op == "" || c.Op.Compare(v, c.Value))
}

// Rule is one checked rule. Which fields matter depends on Kind.
type Rule struct {
	Name string
	Kind Kind

	// Metric is the metric a threshold or absence rule watches (absence:
	// empty means any event).
	Metric string
	// Window is a threshold rule's window (tumbling or hopping).
	Window aggregate.WindowSpec
	// Agg is the aggregate a threshold rule compares (count, sum, min,
	// max, avg, last, p50, p95, p99).
	Agg string
	// Op and Value are a threshold rule's comparison.
	Op    Op
	Value float64
	// GroupBy lists the dimensions of a threshold or absence rule's groups
	// ("device" or a tag key); empty is one group for the fleet.
	GroupBy []string
	// For is how many consecutive windows must cross (threshold; default 1).
	For int
	// Provisional makes a threshold rule fire on provisional windows
	// (on: provisional) instead of waiting until they are final.
	Provisional bool

	// After is the silence (absence, event time) or the time offline
	// (offline, processing time) that fires.
	After time.Duration

	// First and Then are a sequence rule's conditions; Within bounds the
	// event time from First to Then.
	First, Then Condition
	Within      time.Duration

	// FillRatio fires a buffer rule when used/capacity reaches it (0: off).
	FillRatio float64
	// TimeToFull fires a buffer rule when the buffer would be full within
	// it at the reported fill rate (0: off).
	TimeToFull time.Duration
}

// ConfigError names the rule and the key that are wrong.
type ConfigError struct {
	// Rule is the rule's name, or rules[i] when it has none.
	Rule string
	// Key is the offending key (dotted for nested keys: first.metric).
	Key    string
	Reason string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("rule %s: key %s: %s", e.Rule, e.Key, e.Reason)
}

// MaxRules bounds the rules one configuration may hold.
const MaxRules = 1000

// ParseYAML reads a YAML document whose top-level rules: key is the list
// of rules (other top-level keys are ignored, so the hub's whole config
// file may be given).
func ParseYAML(data []byte) ([]Rule, error) {
	var doc struct {
		Rules any `yaml:"rules"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("rules: %w", err)
	}
	return Parse(doc.Rules)
}

// Parse checks a rules list as a YAML or viper decoder produces it (a list
// of maps). nil is no rules. Any error is a *ConfigError.
func Parse(list any) ([]Rule, error) {
	if list == nil {
		return nil, nil
	}
	items, ok := list.([]any)
	if !ok {
		if ms, ok2 := list.([]map[string]any); ok2 {
			for _, m := range ms {
				items = append(items, m)
			}
		} else {
			return nil, &ConfigError{Rule: "rules", Key: "rules", Reason: fmt.Sprintf("want a list of rules, got %T", list)}
		}
	}
	if len(items) > MaxRules {
		return nil, &ConfigError{Rule: "rules", Key: "rules", Reason: fmt.Sprintf("%d rules, at most %d", len(items), MaxRules)}
	}
	out := make([]Rule, 0, len(items))
	seen := map[string]bool{}
	for i, it := range items {
		p := &parser{m: toMap(it), rule: fmt.Sprintf("rules[%d]", i)}
		if p.m == nil {
			return nil, &ConfigError{Rule: p.rule, Key: "rules", Reason: fmt.Sprintf("want a map, got %T", it)}
		}
		r, err := p.parse()
		if err != nil {
			return nil, err
		}
		if seen[r.Name] {
			return nil, &ConfigError{Rule: strconv.Quote(r.Name), Key: "name", Reason: "duplicate rule name"}
		}
		seen[r.Name] = true
		out = append(out, r)
	}
	return out, nil
}

func toMap(v any) map[string]any {
	switch m := v.(type) {
	case map[string]any:
		return m
	case map[any]any:
		out := make(map[string]any, len(m))
		for k, x := range m {
			out[fmt.Sprint(k)] = x
		}
		return out
	}
	return nil
}

type parser struct {
	m    map[string]any
	rule string
	used map[string]bool
}

func (p *parser) errf(key, format string, args ...any) error {
	return &ConfigError{Rule: p.rule, Key: key, Reason: fmt.Sprintf(format, args...)}
}

func (p *parser) get(key string) (any, bool) {
	if p.used == nil {
		p.used = map[string]bool{}
	}
	p.used[key] = true
	v, ok := p.m[key]
	return v, ok && v != nil
}

func (p *parser) str(key string, required bool) (string, error) {
	v, ok := p.get(key)
	if !ok {
		if required {
			return "", p.errf(key, "missing")
		}
		return "", nil
	}
	s, isStr := v.(string)
	if !isStr || strings.TrimSpace(s) == "" {
		return "", p.errf(key, "want a non-empty string, got %v", v)
	}
	return strings.TrimSpace(s), nil
}

func (p *parser) num(key string, required bool) (float64, bool, error) {
	v, ok := p.get(key)
	if !ok {
		if required {
			return 0, false, p.errf(key, "missing")
		}
		return 0, false, nil
	}
	f, err := number(v)
	if err != nil {
		return 0, false, p.errf(key, "%v", err)
	}
	return f, true, nil
}

func number(v any) (float64, error) {
	var f float64
	switch x := v.(type) {
	case int:
		f = float64(x)
	case int64:
		f = float64(x)
	case uint64:
		f = float64(x)
	case float64:
		f = x
	case float32:
		f = float64(x)
	case string:
		var err error
		if f, err = strconv.ParseFloat(strings.TrimSpace(x), 64); err != nil {
			return 0, fmt.Errorf("want a number, got %q", x)
		}
	default:
		return 0, fmt.Errorf("want a number, got %v", v)
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("want a finite number, got %v", v)
	}
	return f, nil
}

func (p *parser) dur(key string, required bool) (time.Duration, error) {
	v, ok := p.get(key)
	if !ok {
		if required {
			return 0, p.errf(key, "missing")
		}
		return 0, nil
	}
	var d time.Duration
	switch x := v.(type) {
	case string:
		var err error
		if d, err = time.ParseDuration(strings.TrimSpace(x)); err != nil {
			return 0, p.errf(key, "want a duration (30s, 5m), got %q", x)
		}
	case time.Duration:
		d = x
	default:
		return 0, p.errf(key, "want a duration (30s, 5m), got %v", v)
	}
	if d <= 0 {
		return 0, p.errf(key, "want a positive duration, got %v", d)
	}
	return d, nil
}

func (p *parser) op(key string) (Op, error) {
	s, err := p.str(key, true)
	if err != nil {
		return "", err
	}
	if !slices.Contains(ops, Op(s)) {
		return "", p.errf(key, "unknown operator %q (want >, >=, <, <=, ==, !=)", s)
	}
	return Op(s), nil
}

func (p *parser) strList(key string) ([]string, error) {
	v, ok := p.get(key)
	if !ok {
		return nil, nil
	}
	var raw []any
	switch x := v.(type) {
	case []any:
		raw = x
	case []string:
		for _, s := range x {
			raw = append(raw, s)
		}
	case string:
		for _, s := range strings.Split(x, ",") {
			raw = append(raw, s)
		}
	default:
		return nil, p.errf(key, "want a list of names, got %v", v)
	}
	var out []string
	for _, r := range raw {
		s, isStr := r.(string)
		s = strings.TrimSpace(s)
		if !isStr || s == "" {
			return nil, p.errf(key, "want non-empty names, got %v", r)
		}
		if slices.Contains(out, s) {
			return nil, p.errf(key, "%q twice", s)
		}
		out = append(out, s)
	}
	return out, nil
}

func (p *parser) parse() (Rule, error) {
	var r Rule
	name, err := p.str("name", true)
	if err != nil {
		return r, err
	}
	p.rule = strconv.Quote(name)
	if strings.ContainsAny(name, "/,=") {
		return r, p.errf("name", "must not contain '/', ',' or '='")
	}
	r.Name = name
	kind, err := p.str("kind", false)
	if err != nil {
		return r, err
	}
	if kind == "" {
		if _, ok := p.m["agg"]; !ok {
			return r, p.errf("kind", "missing (threshold, absence, offline, sequence or buffer; a rule with agg: is a threshold)")
		}
		kind = string(Threshold)
	}
	r.Kind = Kind(kind)
	switch r.Kind {
	case Threshold:
		err = p.threshold(&r)
	case Absence:
		err = p.absence(&r)
	case Offline:
		r.After, err = p.dur("after", true)
	case Sequence:
		err = p.sequence(&r)
	case Buffer:
		err = p.buffer(&r)
	default:
		return r, p.errf("kind", "unknown kind %q (want threshold, absence, offline, sequence or buffer)", kind)
	}
	if err != nil {
		return r, err
	}
	keys := make([]string, 0, len(p.m))
	for k := range p.m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !p.used[k] {
			return r, p.errf(k, "unknown key for a %s rule", r.Kind)
		}
	}
	return r, nil
}

func (p *parser) threshold(r *Rule) error {
	var err error
	if r.Metric, err = p.str("metric", true); err != nil {
		return err
	}
	ws, err := p.str("window", true)
	if err != nil {
		return err
	}
	if r.Window, err = aggregate.ParseWindowSpec(ws); err != nil {
		return p.errf("window", "%v", err)
	}
	if r.Window.Kind != aggregate.Tumbling && r.Window.Kind != aggregate.Hopping {
		return p.errf("window", "a threshold rule takes a tumbling or hopping window, got %s", ws)
	}
	if r.Window.Kind == aggregate.Tumbling {
		r.Window.Slide = r.Window.Size
	}
	if r.Agg, err = p.str("agg", true); err != nil {
		return err
	}
	r.Agg = strings.ToLower(r.Agg)
	if !slices.Contains(aggNames, r.Agg) {
		return p.errf("agg", "unknown aggregate %q (want %s)", r.Agg, strings.Join(aggNames, ", "))
	}
	if r.Op, err = p.op("op"); err != nil {
		return err
	}
	if r.Value, _, err = p.num("value", true); err != nil {
		return err
	}
	if r.GroupBy, err = p.strList("group_by"); err != nil {
		return err
	}
	r.For = 1
	if f, ok, err := p.num("for", false); err != nil {
		return err
	} else if ok {
		if f != math.Trunc(f) || f < 1 || f > 1000 {
			return p.errf("for", "want a whole number of windows from 1 to 1000, got %v", f)
		}
		r.For = int(f)
	}
	on, err := p.str("on", false)
	if err != nil {
		return err
	}
	switch on {
	case "", "final":
	case "provisional":
		r.Provisional = true
	default:
		return p.errf("on", "want final or provisional, got %q", on)
	}
	return nil
}

func (p *parser) absence(r *Rule) error {
	var err error
	if r.Metric, err = p.str("metric", false); err != nil {
		return err
	}
	if r.After, err = p.dur("after", true); err != nil {
		return err
	}
	if r.GroupBy, err = p.strList("group_by"); err != nil {
		return err
	}
	if _, ok := p.m["group_by"]; !ok {
		r.GroupBy = []string{"device"}
	}
	return nil
}

func (p *parser) sequence(r *Rule) error {
	var err error
	if r.First, err = p.condition("first"); err != nil {
		return err
	}
	if r.Then, err = p.condition("then"); err != nil {
		return err
	}
	r.Within, err = p.dur("within", true)
	return err
}

func (p *parser) condition(key string) (Condition, error) {
	v, ok := p.get(key)
	if !ok {
		return Condition{}, p.errf(key, "missing")
	}
	m := toMap(v)
	if m == nil {
		return Condition{}, p.errf(key, "want a map {metric, op?, value?}, got %v", v)
	}
	sub := &parser{m: m, rule: p.rule}
	var c Condition
	var err error
	wrap := func(err error) error {
		if ce, ok := err.(*ConfigError); ok {
			ce.Key = key + "." + ce.Key
		}
		return err
	}
	if c.Metric, err = sub.str("metric", true); err != nil {
		return c, wrap(err)
	}
	if _, has := m["op"]; has {
		if c.Op, err = sub.op("op"); err != nil {
			return c, wrap(err)
		}
		if c.Value, _, err = sub.num("value", true); err != nil {
			return c, wrap(err)
		}
	} else if _, has := m["value"]; has {
		return c, wrap(sub.errf("op", "missing (value: needs an op:)"))
	}
	for k := range m {
		if !sub.used[k] {
			return c, wrap(sub.errf(k, "unknown key (want metric, op, value)"))
		}
	}
	return c, nil
}

func (p *parser) buffer(r *Rule) error {
	f, ok, err := p.num("fill_ratio", false)
	if err != nil {
		return err
	}
	if ok && (f <= 0 || f > 1) {
		return p.errf("fill_ratio", "want a ratio in (0, 1], got %v", f)
	}
	r.FillRatio = f
	if r.TimeToFull, err = p.dur("time_to_full", false); err != nil {
		return err
	}
	if r.FillRatio == 0 && r.TimeToFull == 0 {
		return p.errf("fill_ratio", "a buffer rule needs fill_ratio or time_to_full")
	}
	return nil
}
