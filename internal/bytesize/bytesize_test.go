package bytesize

import "testing"

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"1024": 1024, "4KiB": 4096, "256MiB": 256 << 20, "2GiB": 2 << 30, "3M": 3 << 20, "5 KB": 5 << 10, "7B": 7} {
		if got, err := Parse(in); err != nil || got != want {
			t.Errorf("Parse(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "1.5MiB", "MiB", "9999999999GiB"} {
		if _, err := Parse(in); err == nil {
			t.Errorf("Parse(%q) accepted", in)
		}
	}
}
