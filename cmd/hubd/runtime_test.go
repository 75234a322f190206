package main

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestProcsFor(t *testing.T) {
	for _, c := range []struct {
		name                  string
		setting               int
		env                   bool
		current, numCPU, want int
	}{
		{"two CPUs, no limit", 0, false, 2, 2, 4},
		{"one CPU, no limit", 0, false, 1, 1, 4},
		{"three CPUs", 0, false, 3, 3, 4},
		{"four CPUs", 0, false, 4, 4, 0},
		{"many CPUs", 0, false, 32, 32, 0},
		{"cgroup quota below the CPUs", 0, false, 2, 8, 0},
		{"GOMAXPROCS in the environment", 0, true, 2, 2, 0},
		{"explicit setting", 3, false, 2, 2, 3},
		{"explicit setting beats the environment", 6, true, 2, 2, 6},
	} {
		got, why := procsFor(c.setting, c.env, c.current, c.numCPU)
		if got != c.want || why == "" {
			t.Errorf("%s: procsFor = %d (%q), want %d", c.name, got, why, c.want)
		}
	}
}

func TestSetProcsRestores(t *testing.T) {
	prev := runtime.GOMAXPROCS(0)
	restore, n, _ := setProcs(prev+1, func(string) string { return "" })
	if n != prev+1 || runtime.GOMAXPROCS(0) != prev+1 {
		t.Fatalf("setProcs(%d): %d, GOMAXPROCS %d", prev+1, n, runtime.GOMAXPROCS(0))
	}
	restore()
	if got := runtime.GOMAXPROCS(0); got != prev {
		t.Fatalf("GOMAXPROCS %d after restore, want %d", got, prev)
	}
}

func TestGCPercentFor(t *testing.T) {
	for _, c := range []struct {
		name           string
		setting        int
		keySet, envSet bool
		want           int
	}{
		{"default", defaultGCPercent, false, false, defaultGCPercent},
		{"GOGC in the environment", defaultGCPercent, false, true, 0},
		{"key set", 300, true, true, 300},
		{"key 0: Go's default", 0, true, false, 0},
	} {
		got, why := gcPercentFor(c.setting, c.keySet, c.envSet)
		if got != c.want || why == "" {
			t.Errorf("%s: gcPercentFor = %d (%q), want %d", c.name, got, why, c.want)
		}
	}
}

func TestSetGCPercentRestores(t *testing.T) {
	prev := debug.SetGCPercent(100)
	defer debug.SetGCPercent(prev)
	restore, pct, _ := setGCPercent(250, true, func(string) string { return "" })
	if got := debug.SetGCPercent(250); pct != 250 || got != 250 {
		t.Fatalf("setGCPercent(250): reported %d, in force %d", pct, got)
	}
	restore()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("GC percent %d after restore, want 100", got)
	}
	if _, pct, _ := setGCPercent(0, true, func(string) string { return "" }); pct != 100 {
		t.Fatalf("gc-percent 0 reports %d in force, want 100", pct)
	}
}
