package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"edgeflow/internal/bytesize"
)

// gcMemoryAuto is --gc-memory's default; gcMemoryOff keeps Go's defaults.
const (
	gcMemoryAuto = "auto"
	gcMemoryOff  = "off"
)

// minAutoGCMemory is the least memory "auto" hands the collector; with less
// available, fleetsim collects as Go does by default.
const minAutoGCMemory = 1 << 30

// gcMemory is how fleetsim's garbage collector runs (--gc-memory).
//
// All simulated devices share this one process, so each collection slows
// every device at once: at 10,000 devices fleetsim collected every 4 – 5 s,
// its goroutines spent 0.6 – 0.9 s of CPU a cycle helping the collector
// mark, and the sends of all devices stalled together, something no fleet
// of real devices, each with its own CPU, does. fleetsim therefore trades
// memory for fidelity: it collects only as its heap reaches a limit, by
// default half of the memory available when it starts (a 10,000-device
// run allocates about 60 MB/s, so on this 24 GiB machine it runs minutes
// between collections). A size sets the limit; off keeps Go's defaults
// (GOGC=100), as do GOGC or GOMEMLIMIT set in the environment.
type gcMemory struct {
	limit int64  // 0: Go's defaults
	why   string // for the start-up line
}

// parseGCMemory reads --gc-memory: auto, off or a size such as 8GiB.
func parseGCMemory(spec string, getenv func(string) string, available func() (int64, bool)) (gcMemory, error) {
	switch spec {
	case gcMemoryOff:
		return gcMemory{why: "--gc-memory off"}, nil
	case gcMemoryAuto, "":
		if getenv("GOGC") != "" || getenv("GOMEMLIMIT") != "" {
			return gcMemory{why: "GOGC or GOMEMLIMIT set in the environment"}, nil
		}
		avail, ok := available()
		if !ok {
			return gcMemory{why: "available memory unknown"}, nil
		}
		if avail/2 < minAutoGCMemory {
			return gcMemory{why: fmt.Sprintf("half the available memory (%d MiB) is below 1 GiB", avail>>21)}, nil
		}
		return gcMemory{limit: avail / 2, why: "half the available memory"}, nil
	}
	n, err := bytesize.Parse(spec)
	if err != nil || n < 64<<20 {
		return gcMemory{}, fmt.Errorf("flag --gc-memory: %q is not auto, off or a size of at least 64MiB (e.g. 8GiB)", spec)
	}
	return gcMemory{limit: n, why: "--gc-memory"}, nil
}

// apply sets the collector and returns a function that restores what was
// set before (run is also called from tests, in one process).
func (g gcMemory) apply() (restore func()) {
	if g.limit == 0 {
		return func() {}
	}
	pct := debug.SetGCPercent(-1)
	lim := debug.SetMemoryLimit(g.limit)
	return func() {
		debug.SetMemoryLimit(lim)
		debug.SetGCPercent(pct)
	}
}

// String describes the policy for the start-up line.
func (g gcMemory) String() string {
	if g.limit == 0 {
		return "fleetsim collects garbage with Go's defaults (" + g.why + ")"
	}
	return fmt.Sprintf("fleetsim collects garbage only as its heap nears %.1f GiB (%s; --gc-memory off for Go's defaults)",
		float64(g.limit)/(1<<30), g.why)
}

// availableMemory is the memory this process could still use: the kernel's
// MemAvailable, or what its cgroup (v2) still allows if that is less.
func availableMemory() (int64, bool) {
	avail, ok := memAvailable("/proc/meminfo")
	if !ok {
		return 0, false
	}
	if room, ok := cgroupRoom("/sys/fs/cgroup"); ok && room < avail {
		avail = room
	}
	return avail, true
}

// memAvailable reads MemAvailable (kB) from a meminfo file.
func memAvailable(path string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemAvailable:")
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
		if err != nil || kb <= 0 {
			return 0, false
		}
		return kb << 10, true
	}
	return 0, false
}

// cgroupRoom is memory.max − memory.current of the cgroup v2 mounted at
// dir; false when there is no limit or no cgroup v2.
func cgroupRoom(dir string) (int64, bool) {
	read := func(name string) (int64, bool) {
		b, err := os.ReadFile(dir + "/" + name)
		if err != nil {
			return 0, false
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return n, err == nil
	}
	limit, ok := read("memory.max") // "max" (no limit) does not parse
	if !ok {
		return 0, false
	}
	cur, ok := read("memory.current")
	if !ok {
		return 0, false
	}
	return max(0, limit-cur), true
}
