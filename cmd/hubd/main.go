// Command hubd runs an edgeflow hub: an MQTT broker (embedded, or an
// external one with --mqtt-url), the ingest pipeline with its write-ahead
// log, and the HTTP API. Configuration: YAML (--config) < HUBD_* < flags;
// see configs/hubd.yaml.
//
// `hubd rebuild [flags]` recomputes the aggregates from the stored log with
// the current aggregate configuration and replaces them in the checkpoint
// (stop the running hubd first); see hub.Rebuild.
//
// `hubd --demo` also runs a small simulated fleet against the hub (see
// package demo), so the dashboard at / shows live data at once.
//
// `hubd passwd [--file F] DEVICE < password` makes a credentials line for
// the embedded broker's mqtt-auth-file; see docs/SECURITY.md.
//
// `hubd query --hub URL --hub URL ... --metric M --window tumbling:1m
// --from T --to T` answers a windowed-aggregate query merged across hubs
// that each own part of the fleet; see hubapi.QueryHubs and `hubd query --help`.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/pflag"

	"edgeflow/demo"
	"edgeflow/hub"
	"edgeflow/hub/hublog"
	"edgeflow/internal/debugsrv"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// run is main with its inputs and exit code explicit, for tests.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "passwd" {
		return runPasswd(args[1:], os.Stdin, stdout, stderr)
	}
	if len(args) > 0 && args[0] == "query" {
		return runQuery(args[1:], stdout, stderr, os.Getenv)
	}
	rebuild := len(args) > 0 && args[0] == "rebuild"
	if rebuild {
		args = args[1:]
	}
	cfg, err := loadConfig(args)
	if errors.Is(err, pflag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "hubd: %v\n", err)
		return 2
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: cfg.logLevel}))
	restoreProcs, procs, why := setProcs(cfg.gomaxprocs, os.Getenv)
	defer restoreProcs()
	logger.Info("Go Ps", "gomaxprocs", procs, "cpus", runtime.NumCPU(), "why", why)
	restoreGC, gcPct, gcWhy := setGCPercent(cfg.gcPercent, cfg.gcPercentSet, os.Getenv)
	defer restoreGC()
	logger.Info("Go garbage collector", "gc_percent", gcPct, "why", gcWhy)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cfg.hub.Logger, cfg.hub.Registerer, cfg.hub.Gatherer = logger, reg, reg
	restoreMem, goLimit := applyGoMemoryLimit(cfg.memory, os.Getenv)
	defer restoreMem()
	registerMemoryBudget(reg, logger, cfg.memory, goLimit)
	if rebuild {
		return runRebuild(cfg, logger, stderr)
	}
	_, stopProfiles, err := debugsrv.Start(cfg.pprofAddr, logger, nil)
	if err != nil {
		fmt.Fprintf(stderr, "hubd: config key \"pprof-addr\": %v\n", err)
		return 2
	}
	defer stopProfiles()
	if cfg.demo {
		return runDemo(cfg, logger, stderr)
	}
	srv, err := hub.New(cfg.hub)
	if err != nil {
		fmt.Fprintf(stderr, "hubd: %v\n", explainOptionsError(err))
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go reloadOnHUP(ctx, hup, srv, logger)
	if err := srv.Run(ctx); err != nil {
		logger.Error("hubd failed", "err", err)
		if errors.Is(err, hublog.ErrCorrupt) || errors.Is(err, hublog.ErrStoreLocked) {
			fmt.Fprintf(stderr, "hubd: %v\n", err) // the store's state and the choices, readable on their own
		}
		return 1
	}
	return 0
}

// runDemo is `hubd --demo`: the hub plus a simulated fleet (package demo)
// until SIGINT or SIGTERM.
func runDemo(cfg *config, logger *slog.Logger, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := demo.Run(ctx, demo.Options{Hub: cfg.hub, Logger: logger}); err != nil {
		fmt.Fprintf(stderr, "hubd --demo: %v\n", explainOptionsError(err))
		return 1
	}
	return 0
}

// runRebuild is `hubd rebuild`.
func runRebuild(cfg *config, logger *slog.Logger, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	res, err := hub.Rebuild(ctx, cfg.hub)
	if err != nil {
		fmt.Fprintf(stderr, "hubd rebuild: %v\n", explainOptionsError(err))
		return 1
	}
	logger.Info("aggregates rebuilt from the log", "checkpoint_position", res.Position, "first_log_entry", res.FirstEntry,
		"entries", res.Entries, "batches", res.Batches, "events", res.Events, "generation", res.Generation, "took", res.Took,
		"from_whole_log", res.FromLog, "damaged_positions", res.DamagedPositions)
	if len(cfg.hub.Rules) > 0 {
		logger.Info("alerts recomputed from the log", "alerts", res.Alerts, "changed", res.AlertsChanged, "alert_seq", res.AlertSeq)
		if res.AlertsChanged {
			logger.Warn("the rebuilt alerts differ from the checkpoint's: alert outputs continue from the rebuilt sequence and do not resend the recomputed alerts", "alert_seq", res.AlertSeq)
		}
	}
	if res.FirstEntry > 1 {
		logger.Warn("log entries before first_log_entry were deleted by retention; their events are not in the rebuilt aggregates")
	}
	return 0
}
