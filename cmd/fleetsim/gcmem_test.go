package main

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

func TestParseGCMemory(t *testing.T) {
	env := func(kv ...string) func(string) string {
		return func(k string) string {
			for i := 0; i+1 < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1]
				}
			}
			return ""
		}
	}
	avail := func(n int64, ok bool) func() (int64, bool) { return func() (int64, bool) { return n, ok } }
	for _, c := range []struct {
		spec  string
		env   func(string) string
		avail func() (int64, bool)
		want  int64
	}{
		{"auto", env(), avail(20<<30, true), 10 << 30},
		{"", env(), avail(20<<30, true), 10 << 30},
		{"auto", env("GOGC", "200"), avail(20<<30, true), 0},
		{"auto", env("GOMEMLIMIT", "4GiB"), avail(20<<30, true), 0},
		{"auto", env(), avail(0, false), 0},
		{"auto", env(), avail(1<<30, true), 0}, // half is below 1 GiB
		{"off", env(), avail(20<<30, true), 0},
		{"8GiB", env(), avail(0, false), 8 << 30},
		{"8GiB", env("GOGC", "200"), avail(0, false), 8 << 30}, // an explicit size wins
	} {
		g, err := parseGCMemory(c.spec, c.env, c.avail)
		if err != nil || g.limit != c.want {
			t.Errorf("parseGCMemory(%q) = %d, %v; want %d", c.spec, g.limit, err, c.want)
		}
		if g.String() == "" {
			t.Errorf("parseGCMemory(%q): no description", c.spec)
		}
	}
	for _, bad := range []string{"on", "1MiB", "-1", "lots"} {
		if _, err := parseGCMemory(bad, env(), avail(20<<30, true)); err == nil || !strings.Contains(err.Error(), "--gc-memory") {
			t.Errorf("parseGCMemory(%q): %v, want an error naming the flag", bad, err)
		}
	}
}

func TestGCMemoryApplyRestores(t *testing.T) {
	before := debug.SetGCPercent(-1)
	debug.SetGCPercent(before)
	const limit int64 = 2 << 30
	restore := gcMemory{limit: limit}.apply()
	if got := debug.SetMemoryLimit(-1); got != limit {
		t.Errorf("memory limit %d while applied, want %d", got, limit)
	}
	restore()
	if got := debug.SetGCPercent(-1); got != before {
		t.Errorf("GC percent %d after restore, want %d", got, before)
	}
	debug.SetGCPercent(before)
}

func TestAvailableMemoryFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	mi := write("meminfo", "MemTotal:       24000000 kB\nMemFree:         1000000 kB\nMemAvailable:   20000000 kB\n")
	if n, ok := memAvailable(mi); !ok || n != 20000000<<10 {
		t.Errorf("memAvailable = %d, %v", n, ok)
	}
	if _, ok := memAvailable(write("bad", "MemTotal: 1 kB\n")); ok {
		t.Error("memAvailable without the line: ok")
	}
	write("memory.max", "8589934592\n")
	write("memory.current", "1073741824\n")
	if n, ok := cgroupRoom(dir); !ok || n != 7<<30 {
		t.Errorf("cgroupRoom = %d, %v; want 7 GiB", n, ok)
	}
	write("memory.max", "max\n")
	if _, ok := cgroupRoom(dir); ok {
		t.Error("cgroupRoom with no limit: ok")
	}
}
