package main

import (
	"runtime"
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
