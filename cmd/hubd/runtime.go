package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
)

// minGCProcs is the fewest Ps (GOMAXPROCS) with which Go's garbage
// collector runs a dedicated mark worker: with 1 to 3 it marks with
// fractional workers, a quarter of each P's time, so a mark phase lasts
// longer and the goroutines that allocate during it are made to help
// ("assists"), in the middle of serving batches. On this 2-CPU machine, at
// 10,000 devices, hubd's marks took 0.4 – 1.6 s with 2 Ps, with 0.2 – 0.9 s
// of assists, and each one pushed that second's acks to about a second;
// with 4 Ps they took 0.3 – 0.7 s with assists of a few milliseconds in
// most cycles, and the p99 event-to-ack latency went from 429 – 770 ms
// (three runs) to 290 – 547 ms (six runs; docs/FLEET-LATENCY.md).
const minGCProcs = 4

// procsFor decides hubd's GOMAXPROCS. setting is the gomaxprocs key: N > 0
// runs with N Ps; 0 (auto) keeps the runtime's choice, except that on a
// machine with fewer than minGCProcs CPUs and no CPU limit on the process
// it runs with minGCProcs. A limit (GOMAXPROCS in the environment, or a
// cgroup quota or CPU affinity, which make the runtime's choice smaller
// than the machine's CPUs) is kept: more threads than a quota allows get
// the process throttled. It returns 0 to leave GOMAXPROCS as it is, and
// why, for the log.
func procsFor(setting int, envSet bool, current, numCPU int) (procs int, why string) {
	switch {
	case setting > 0:
		return setting, "the gomaxprocs setting"
	case envSet:
		return 0, "GOMAXPROCS is set in the environment"
	case current < numCPU:
		return 0, "the process has a CPU limit"
	case current >= minGCProcs:
		return 0, "enough CPUs"
	}
	return minGCProcs, fmt.Sprintf("fewer than %d CPUs and no CPU limit: with fewer Ps Go's garbage collector has no dedicated mark worker, and its marks delay acks (gomaxprocs sets it)", minGCProcs)
}

// setProcs applies procsFor and returns a function that restores the
// previous value (run is also called from tests, in one process).
func setProcs(setting int, getenv func(string) string) (restore func(), procs int, why string) {
	prev := runtime.GOMAXPROCS(0)
	n, why := procsFor(setting, getenv("GOMAXPROCS") != "", prev, runtime.NumCPU())
	if n == 0 || n == prev {
		return func() {}, prev, why
	}
	runtime.GOMAXPROCS(n)
	return func() { runtime.GOMAXPROCS(prev) }, n, why
}

// defaultGCPercent is hubd's garbage-collection target (GOGC) unless the
// gc-percent key or GOGC says otherwise. Each of hubd's collections delays
// the acks of the batches that arrive during its mark phase, and at 10,000
// devices sending every second those seconds made up the p99; at 200 it
// collects about half as often as at Go's 100 (16 collections in a
// 3-minute run instead of 28), for a heap that grows to about three times
// its live data instead of two (1.0 – 1.9 GB at each collection at
// 10,000 devices instead of 0.7 – 1.3 GB).
const defaultGCPercent = 200

// gcPercentFor decides hubd's GOGC: setting is the gc-percent key (0:
// default); GOGC in the environment is kept unless the key is set. It
// returns 0 to leave the collector as it is, and why.
func gcPercentFor(setting int, keySet, envSet bool) (pct int, why string) {
	switch {
	case keySet && setting > 0:
		return setting, "the gc-percent setting"
	case keySet:
		return 0, "gc-percent 0: Go's default"
	case envSet:
		return 0, "GOGC is set in the environment"
	}
	return defaultGCPercent, "hubd's default: fewer collections, each of which delays acks, for a larger heap"
}

// setGCPercent applies gcPercentFor and returns a function that restores
// the previous value, and the value now in force.
func setGCPercent(setting int, keySet bool, getenv func(string) string) (restore func(), pct int, why string) {
	pct, why = gcPercentFor(setting, keySet, getenv("GOGC") != "")
	if pct == 0 {
		s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
		metrics.Read(s)
		return func() {}, int(s[0].Value.Uint64()), why
	}
	prev := debug.SetGCPercent(pct)
	return func() { debug.SetGCPercent(prev) }, pct, why
}
