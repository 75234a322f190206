package aggregate

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// bareWindowEngine has events of metric "m" spread over four minutes, and
// a configured window whose name is a duration.
func bareWindowEngine(t *testing.T) *Engine {
	t.Helper()
	o := testOptions()
	o.Windows = append(o.Windows, WindowConfig{Name: "30s", Kind: "session", Gap: 30 * time.Second})
	e := newEngine(t, o)
	var evs []ev
	for i := range 24 {
		evs = append(evs, ev{seq: uint64(i + 1), metric: "m", v: float64(i), t: at(time.Duration(i) * 10 * time.Second)})
	}
	mustApply(t, e, batchOf("dev", 1, at(0), evs...))
	return e
}

// TestBareDurationWindow: a window given as a bare duration is a tumbling
// window of that size, answered as the explicit tumbling:size query is.
func TestBareDurationWindow(t *testing.T) {
	e := bareWindowEngine(t)
	for name, size := range map[string]time.Duration{"20s": 20 * time.Second, "2m": 2 * time.Minute, "1m30s": 90 * time.Second} {
		q := dayQuery("m", WindowSpec{})
		q.WindowName = name
		got := mustQuery(t, e, q)
		want := mustQuery(t, e, dayQuery("m", WindowSpec{Kind: Tumbling, Size: size}))
		if len(got) == 0 || !reflect.DeepEqual(got, want) {
			t.Errorf("window %s: %d windows %+v, want tumbling:%v's %d", name, len(got), got, size, len(want))
		}
		for _, w := range got {
			if w.End.Sub(w.Start) != size {
				t.Errorf("window %s: [%v, %v) is not %v long", name, w.Start, w.End, size)
			}
		}
	}
}

// TestConfiguredNameWinsOverDuration: a configured window named "30s"
// (a session window here) answers for "30s", not a 30s tumbling window.
func TestConfiguredNameWinsOverDuration(t *testing.T) {
	e := bareWindowEngine(t)
	q := dayQuery("m", WindowSpec{})
	q.WindowName = "30s"
	got := mustQuery(t, e, q)
	want := mustQuery(t, e, dayQuery("m", WindowSpec{Kind: Session, Gap: 30 * time.Second}))
	if len(got) != 1 || !reflect.DeepEqual(got, want) {
		t.Fatalf("window 30s: %+v, want the configured session window's %+v", got, want)
	}
}

// TestBareDurationWindowErrors: a duration that is not a positive
// multiple of the resolution, and a name that is neither configured nor a
// duration, are parameter errors naming the window parameter.
func TestBareDurationWindowErrors(t *testing.T) {
	e := bareWindowEngine(t)
	for name, want := range map[string]string{
		"15s":  `"15s" is a tumbling window of 15s, not a positive multiple of the resolution 10s`,
		"0s":   `"0s" is a tumbling window of 0s, not a positive multiple of the resolution 10s`,
		"-1m":  `"-1m" is a tumbling window of -1m0s, not a positive multiple`,
		"60":   `no configured window "60"`,
		"hour": `no configured window "hour" (give a configured name, kind:size such as tumbling:1m, or a duration such as 1m`,
	} {
		q := dayQuery("m", WindowSpec{})
		q.WindowName = name
		_, err := e.Query(q)
		var pe *ParamError
		if !errors.As(err, &pe) || pe.Param != "window" || !strings.Contains(err.Error(), want) {
			t.Errorf("window %q: %v, want a window parameter error with %q", name, err, want)
		}
	}
}
