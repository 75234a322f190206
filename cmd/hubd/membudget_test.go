package main

import (
	"bytes"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"edgeflow/hub/membudget"
)

// TestMemoryBudgetConfig checks that memory-limit and profile size the
// hub's options, that an explicit key wins over the budget, that the
// server default sets no Go memory limit, and that bad values name the key.
func TestMemoryBudgetConfig(t *testing.T) {
	cfg, err := loadConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.memoryChosen || cfg.memory.Limit != membudget.ServerLimit || cfg.memory.GoMemoryLimit != 0 {
		t.Errorf("default: chosen %v, sizes %+v", cfg.memoryChosen, cfg.memory)
	}
	if cfg.hub.Memory.BadgerMemTable != 64<<20 || cfg.hub.Memory.ClientQueue != 1024 {
		t.Errorf("default Memory = %+v", cfg.hub.Memory)
	}

	cfg, err = loadConfig([]string{"--memory-limit", "256MiB"})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := membudget.Derive(256 << 20)
	if !cfg.memoryChosen || cfg.hub.Memory != want {
		t.Errorf("memory-limit 256MiB: chosen %v, Memory %+v, want %+v", cfg.memoryChosen, cfg.hub.Memory, want)
	}
	o := cfg.hub
	o.EnsureDefaults()
	if o.QueueLen != want.QueueLen || o.MQTTClientQueue != want.ClientQueue || o.Aggregate.QueryCachePartials != want.QueryCachePartials || o.Aggregate.MaxLivePartials != 0 {
		t.Errorf("EnsureDefaults at 256MiB: queue %d, client queue %d, query cache %d; want %+v",
			o.QueueLen, o.MQTTClientQueue, o.Aggregate.QueryCachePartials, want)
	}

	if cfg.gcPercent != 100 || !cfg.gcPercentSet {
		t.Errorf("memory-limit 256MiB: gc-percent %d (set %v), want the budget's 100", cfg.gcPercent, cfg.gcPercentSet)
	}
	if cfg, err = loadConfig([]string{"--memory-limit", "256MiB", "--gc-percent", "300"}); err != nil {
		t.Fatal(err)
	} else if cfg.gcPercent != 300 {
		t.Errorf("explicit gc-percent under a budget: %d, want 300", cfg.gcPercent)
	}
	if pct, set := budgetGCPercent(0, false, want, func(string) string { return "150" }); set || pct != 0 {
		t.Errorf("GOGC in the environment: budget gave %d, %v", pct, set)
	}

	// The profile, from the environment; explicit keys from a file win.
	t.Setenv("HUBD_PROFILE", "small")
	file := filepath.Join(t.TempDir(), "hubd.yaml")
	if err := os.WriteFile(file, []byte("mqtt-client-queue: 700\naggregate:\n  max_live_partials: 1234\n  evict_after: 2h\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err = loadConfig([]string{"--config", file})
	if err != nil {
		t.Fatal(err)
	}
	small, _ := membudget.Derive(membudget.SmallLimit)
	m := cfg.hub.Memory
	if !cfg.memoryChosen || m.Limit != membudget.SmallLimit || m.BadgerMemTable != small.BadgerMemTable {
		t.Errorf("profile small: %+v", m)
	}
	if m.ClientQueue != 700 || cfg.hub.MQTTClientQueue != 700 || m.MaxLivePartials != 1234 || cfg.hub.Aggregate.MaxLivePartials != 1234 ||
		m.EvictAfter != 2*time.Hour || cfg.hub.Aggregate.EvictAfter != 2*time.Hour {
		t.Errorf("explicit keys under profile small: Memory %+v, client queue %d, live partials %d",
			m, cfg.hub.MQTTClientQueue, cfg.hub.Aggregate.MaxLivePartials)
	}

	for _, c := range []struct{ args []string }{
		{[]string{"--memory-limit", "12MiB"}}, {[]string{"--memory-limit", "lots"}}, {[]string{"--profile", "tiny"}},
	} {
		_, err := loadConfig(c.args)
		if err == nil || !strings.Contains(err.Error(), strings.TrimPrefix(c.args[0], "--")) {
			t.Errorf("%v: error %v, want one naming the key", c.args, err)
		}
	}
}

// TestRegisterMemoryBudget checks the start line and the gauge.
func TestRegisterMemoryBudget(t *testing.T) {
	z, err := membudget.Derive(256 << 20)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	reg := prometheus.NewRegistry()
	registerMemoryBudget(reg, slog.New(slog.NewTextHandler(&buf, nil)), z, math.MaxInt64)
	if n := strings.Count(buf.String(), "\n"); n != 1 || !strings.Contains(buf.String(), "memory_limit=256MiB") ||
		!strings.Contains(buf.String(), "badger_memtable=16MiB") {
		t.Errorf("start log (%d lines): %s", n, buf.String())
	}
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 {
		t.Fatalf("gather: %d families, %v", len(mfs), err)
	}
	got := map[string]float64{}
	for _, m := range mfs[0].GetMetric() {
		got[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
	}
	if len(got) != len(z.Components())+1 || got["limit"] != 256<<20 || got["badger_memtables"] != float64(z.BadgerMemTable)*float64(z.BadgerMemTables) ||
		got["apply_lag"] != float64(z.ApplyLag) || got["go_memory_limit"] != float64(z.GoMemoryLimit) {
		t.Errorf("edgeflow_hub_memory_budget_bytes = %v for %+v", got, z)
	}
}
