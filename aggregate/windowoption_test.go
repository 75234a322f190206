package aggregate

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestWindowOptionNotMultiple: a configured window whose size, slide or
// gap is not a multiple of the resolution is an option error that names
// the window's field and says so plainly.
func TestWindowOptionNotMultiple(t *testing.T) {
	for _, c := range []struct {
		w    WindowConfig
		want string
	}{
		{WindowConfig{Name: "w", Kind: "tumbling", Size: 7 * time.Second}, "windows[0].size: 7s is not a positive multiple of the resolution 5s"},
		{WindowConfig{Name: "w", Kind: "hopping", Size: 10 * time.Second, Slide: 3 * time.Second}, "windows[0].slide: 3s is not a positive multiple of the resolution 5s"},
		{WindowConfig{Name: "w", Kind: "session", Gap: 12 * time.Second}, "windows[0].gap: 12s is not a positive multiple of the resolution 5s"},
	} {
		o := Options{Resolution: 5 * time.Second, Windows: []WindowConfig{c.w}}
		o.EnsureDefaults()
		err := o.Validate()
		if !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "query parameter") {
			t.Errorf("%+v: %v, want %q", c.w, err, c.want)
		}
	}
}
