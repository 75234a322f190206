// Package bytesize reads byte counts written for people (256MiB, 2GiB),
// as the commands' flags and config files take them.
package bytesize

import (
	"fmt"
	"strconv"
	"strings"
)

// Parse reads a byte count: a plain integer or one with a KiB, MiB or
// GiB suffix (K, M, G and KB, MB, GB are taken as the same binary units).
func Parse(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range []struct {
		suffixes []string
		m        int64
	}{{[]string{"GiB", "GB", "G"}, 1 << 30}, {[]string{"MiB", "MB", "M"}, 1 << 20}, {[]string{"KiB", "KB", "K"}, 1 << 10}, {[]string{"B"}, 1}} {
		done := false
		for _, suf := range u.suffixes {
			if rest, ok := strings.CutSuffix(t, suf); ok {
				t, mult, done = strings.TrimSpace(rest), u.m, true
				break
			}
		}
		if done {
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("%q is not a size like 1048576, 512KiB, 256MiB or 2GiB", s)
	}
	return n * mult, nil
}
