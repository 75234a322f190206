package hubapi

import (
	"maps"
	"strings"
	"testing"
)

// TestPartitionsHeader: the header round-trips, and each malformed value
// is an error saying what is wrong.
func TestPartitionsHeader(t *testing.T) {
	for _, m := range []map[int]uint64{{}, {0: 1}, {3: 17, 5: 2, 63: 1 << 40}} {
		s := FormatPartitions(m)
		got, err := ParsePartitions(s)
		if err != nil || !maps.Equal(got, m) {
			t.Fatalf("%v -> %q -> %v, %v", m, s, got, err)
		}
	}
	if s := FormatPartitions(map[int]uint64{5: 2, 3: 17}); s != "3:17,5:2" {
		t.Fatalf("not ascending: %q", s)
	}
	for in, want := range map[string]string{
		"3":       "not partition:epoch",
		"3:x":     "not partition:epoch",
		"-1:2":    "not partition:epoch",
		"3:1,3:2": "named twice",
		"3:1,,":   "not partition:epoch",
		strings.Repeat("1:1,", maxHeaderPartitions) + "1:1": "more than",
	} {
		if _, err := ParsePartitions(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%.20q: %v; want an error saying %q", in, err, want)
		}
	}
}

// FuzzParsePartitions: any header value parses or fails without a panic,
// and what parses formats back to a value that parses the same.
func FuzzParsePartitions(f *testing.F) {
	for _, s := range []string{"", "0:1", "3:17,5:2", "1:1,1:2", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParsePartitions(s)
		if err != nil {
			return
		}
		again, err := ParsePartitions(FormatPartitions(m))
		if err != nil || !maps.Equal(m, again) {
			t.Fatalf("%q: %v then %v, %v", s, m, again, err)
		}
	})
}
