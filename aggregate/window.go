package aggregate

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// WindowKind is the shape of a window.
type WindowKind uint8

// Window kinds.
const (
	// Tumbling windows are [k*size, (k+1)*size).
	Tumbling WindowKind = iota + 1
	// Hopping windows are [k*slide, k*slide+size).
	Hopping
	// Sliding windows are the trailing size ending at every resolution step:
	// hopping with slide = Options.Resolution.
	Sliding
	// Session windows group a key's events separated by less than Gap;
	// a session is [first event, last event + gap).
	Session
)

var kindNames = [...]string{Tumbling: "tumbling", Hopping: "hopping", Sliding: "sliding", Session: "session"}

// String returns the kind's name as configured.
func (k WindowKind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", k)
}

// ParseWindowKind parses tumbling, hopping, sliding or session.
func ParseWindowKind(s string) (WindowKind, error) {
	for k, n := range kindNames {
		if n != "" && strings.EqualFold(n, s) {
			return WindowKind(k), nil
		}
	}
	return 0, fmt.Errorf("unknown window kind %q (want tumbling, hopping, sliding or session)", s)
}

// WindowSpec is a window as a query asks for it.
type WindowSpec struct {
	Kind WindowKind
	// Size is the length of tumbling, hopping and sliding windows.
	Size time.Duration
	// Slide is the hop of hopping windows (sliding: the resolution).
	Slide time.Duration
	// Gap is the session gap.
	Gap time.Duration
}

// String formats the spec the way ParseWindowSpec reads it.
func (w WindowSpec) String() string {
	switch w.Kind {
	case Hopping:
		return fmt.Sprintf("hopping:%v/%v", w.Size, w.Slide)
	case Session:
		return fmt.Sprintf("session:%v", w.Gap)
	default:
		return fmt.Sprintf("%v:%v", w.Kind, w.Size)
	}
}

// ParseWindowSpec reads "tumbling:1m", "hopping:5m/1m", "sliding:5m" or
// "session:30s" (the HTTP API's window parameter).
func ParseWindowSpec(s string) (WindowSpec, error) {
	kind, rest, ok := strings.Cut(s, ":")
	if !ok {
		return WindowSpec{}, paramErr("window", "want kind:size (tumbling:1m, hopping:5m/1m, sliding:5m, session:30s) or a configured name, got %q", s)
	}
	k, err := ParseWindowKind(kind)
	if err != nil {
		return WindowSpec{}, paramErr("window", "%v", err)
	}
	size, slide, hasSlide := strings.Cut(rest, "/")
	d, err := time.ParseDuration(size)
	if err != nil {
		return WindowSpec{}, paramErr("window", "bad duration %q", size)
	}
	w := WindowSpec{Kind: k, Size: d}
	if k == Session {
		w = WindowSpec{Kind: k, Gap: d}
	}
	if hasSlide != (k == Hopping) {
		return WindowSpec{}, paramErr("window", "only hopping windows take a /slide")
	}
	if hasSlide {
		if w.Slide, err = time.ParseDuration(slide); err != nil {
			return WindowSpec{}, paramErr("window", "bad slide %q", slide)
		}
	}
	return w, nil
}

// normalize fills the implied slide.
func (w WindowSpec) normalize(res time.Duration) WindowSpec {
	switch w.Kind {
	case Tumbling:
		w.Slide = w.Size
	case Sliding:
		w.Slide = res
	}
	return w
}

// validate checks the spec against the resolution; the error names the
// parameter.
func (w WindowSpec) validate(res time.Duration) error {
	multiple := func(param string, d time.Duration) error {
		if d <= 0 || d%res != 0 {
			return paramErr(param, "%v is not a positive multiple of the resolution %v", d, res)
		}
		return nil
	}
	switch w.Kind {
	case Tumbling, Sliding:
		return multiple("size", w.Size)
	case Hopping:
		if err := multiple("size", w.Size); err != nil {
			return err
		}
		return multiple("slide", w.Slide)
	case Session:
		return multiple("gap", w.Gap)
	}
	return paramErr("window", "unknown kind %v", w.Kind)
}

// resolveWindow turns a window name into its spec: a configured window's,
// or else, for a bare duration such as "10s" or "1m" (how Grafana and
// InfluxDB users write a window), a tumbling window of that size. A
// configured name wins over the duration it spells. The error names the
// window parameter: an unknown name, or a duration that is not a positive
// multiple of the resolution.
func (e *Engine) resolveWindow(name string) (WindowSpec, error) {
	if i := slices.IndexFunc(e.windows, func(w configured) bool { return w.name == name }); i >= 0 {
		return e.windows[i].spec, nil
	}
	d, err := time.ParseDuration(name)
	if err != nil {
		return WindowSpec{}, paramErr("window", "no configured window %q (give a configured name, kind:size such as tumbling:1m, or a duration such as 1m for a tumbling window)", name)
	}
	spec := WindowSpec{Kind: Tumbling, Size: d}
	if err := spec.validate(e.opt.Resolution); err != nil {
		return WindowSpec{}, paramErr("window", "%q is a tumbling window of %v, not a positive multiple of the resolution %v", name, d, e.opt.Resolution)
	}
	return spec, nil
}
