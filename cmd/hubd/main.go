// Command hubd runs an edgeflow hub: an MQTT broker (embedded, or an
// external one with --mqtt-url), the ingest pipeline with its write-ahead
// log, and the HTTP API. Configuration: YAML (--config) < HUBD_* < flags;
// see configs/hubd.yaml.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/pflag"

	"edgeflow/hub"
)

func main() { os.Exit(run(os.Args[1:], os.Stderr)) }

// run is main with its inputs and exit code explicit, for tests.
func run(args []string, stderr io.Writer) int {
	cfg, err := loadConfig(args)
	if errors.Is(err, pflag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "hubd: %v\n", err)
		return 2
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: cfg.logLevel}))
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cfg.hub.Logger, cfg.hub.Registerer, cfg.hub.Gatherer = logger, reg, reg
	srv, err := hub.New(cfg.hub)
	if err != nil {
		fmt.Fprintf(stderr, "hubd: %v\n", explainOptionsError(err))
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := srv.Run(ctx); err != nil {
		logger.Error("hubd failed", "err", err)
		return 1
	}
	return 0
}
