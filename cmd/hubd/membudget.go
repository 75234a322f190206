package main

import (
	"log/slog"
	"math"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"edgeflow/hub"
	"edgeflow/hub/membudget"
	"edgeflow/internal/confval"
)

// addMemoryFlags declares the memory budget's keys.
func addMemoryFlags(fs *pflag.FlagSet) {
	fs.String("memory-limit", "", "memory budget from which hubd sizes Badger's memtables and caches, its queues, the apply lag, the engine's caps and Go's memory limit, e.g. 256MiB (empty: the profile's)")
	fs.String("profile", membudget.ProfileServer, "memory profile: server (a budget of 1GiB, the long-standing defaults) or small (128MiB, for a gateway); memory-limit overrides its budget")
}

// memoryBudget reads memory-limit and profile, derives the sizes and
// applies them to every option whose own key is not set. It returns the
// sizes in force (explicit keys included) and whether the budget was
// chosen (a key set), which sets Go's memory limit.
func memoryBudget(v *viper.Viper, k *confval.Keys, o *hub.Options) (membudget.Sizes, bool) {
	profile := k.OneOf("profile", membudget.ProfileServer, membudget.ProfileSmall)
	chosen := v.IsSet("profile") && profile != membudget.ProfileServer
	limit, err := membudget.ParseLimit(profile)
	if s := k.String("memory-limit"); s != "" {
		if limit, err = membudget.ParseLimit(s); err != nil {
			k.Fail("memory-limit", "%v", err)
			return membudget.Sizes{}, false
		}
		chosen = true
	}
	if err != nil {
		return membudget.Sizes{}, false // profile named the error
	}
	z, err := membudget.Derive(limit)
	if err != nil {
		k.Fail("memory-limit", "%v", err)
		return membudget.Sizes{}, false
	}
	if !chosen {
		z.GoMemoryLimit = 0 // a server keeps Go's default: no limit
	}
	// Explicit keys win; the sizes shown are the ones in force.
	if v.IsSet("mqtt-client-queue") {
		z.ClientQueue = o.MQTTClientQueue
	} else {
		o.MQTTClientQueue = 0 // hub.Options takes it from Memory
	}
	if a := o.Aggregate; a != nil {
		for _, f := range []struct {
			key string
			p   *int
			set *int
		}{{"aggregate.max_live_partials", &z.MaxLivePartials, &a.MaxLivePartials},
			{"aggregate.query_cache_partials", &z.QueryCachePartials, &a.QueryCachePartials},
			{"aggregate.max_pending", &z.MaxPending, &a.MaxPending},
			{"aggregate.stream_buffer", &z.StreamBuffer, &a.StreamBuffer}} {
			if *f.set != 0 {
				*f.p = *f.set
			}
		}
		if a.EvictAfter != 0 {
			z.EvictAfter = a.EvictAfter
		}
	}
	o.Memory = z
	return z, chosen
}

// budgetGCPercent gives the gc-percent key's value and whether it counts
// as set: the key's own when set, else the budget's GCPercent unless GOGC
// is in the environment.
func budgetGCPercent(pct int, set bool, z membudget.Sizes, getenv func(string) string) (int, bool) {
	if set || z.GCPercent == 0 || getenv("GOGC") != "" {
		return pct, set
	}
	return z.GCPercent, true
}

// applyGoMemoryLimit sets Go's soft memory limit from the budget unless
// GOMEMLIMIT is set in the environment; it returns a function restoring
// the previous limit, and the limit in force (math.MaxInt64: none).
func applyGoMemoryLimit(z membudget.Sizes, getenv func(string) string) (restore func(), limit int64) {
	if z.GoMemoryLimit <= 0 || getenv("GOMEMLIMIT") != "" {
		return func() {}, debug.SetMemoryLimit(-1)
	}
	prev := debug.SetMemoryLimit(z.GoMemoryLimit)
	return func() { debug.SetMemoryLimit(prev) }, z.GoMemoryLimit
}

// registerMemoryBudget logs the sizes in one line and exports them as
// edgeflow_hub_memory_budget_bytes{component}.
func registerMemoryBudget(reg prometheus.Registerer, log *slog.Logger, z membudget.Sizes, goLimit int64) {
	attrs := z.LogAttrs()
	if goLimit == math.MaxInt64 {
		attrs = append(attrs, "go_memory_limit", "none")
	}
	log.Info("memory budget", attrs...)
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "edgeflow_hub_memory_budget_bytes",
		Help: "Sizes hubd derived from its memory budget (memory-limit, profile), by component; counts converted at the per-item costs the budget assumes."},
		[]string{"component"})
	g.WithLabelValues("limit").Set(float64(z.Limit))
	for _, c := range z.Components() {
		g.WithLabelValues(c.Name).Set(float64(c.Bytes))
	}
	reg.MustRegister(g)
}
