// Command edgeagent is the edgeflow edge agent: it takes events from local
// programs (HTTP on 127.0.0.1:8181, InfluxDB line protocol over UDP),
// stamps them with the corrected clock, keeps them durably on disk and
// uploads them to the hub over MQTT. Configuration: YAML (--config) <
// EDGEAGENT_* < flags; see configs/edgeagent.yaml. SIGTERM or SIGINT shut
// it down cleanly; a restart resumes from what the hub acknowledged.
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
	"runtime/debug"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/pflag"

	"edgeflow/agent"
)

// version is set at link time (-ldflags "-X main.version=v1.2.3"); it is
// never written at run time.
var version = "dev"

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// versionString is the version plus the VCS revision the build recorded.
func versionString() string {
	v := version
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 && v == "dev" {
				v += "+" + s.Value[:12]
			}
		}
	}
	return v
}

// run is main with its inputs and exit code explicit, for tests.
func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := loadConfig(args, os.Getenv)
	if errors.Is(err, pflag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "edgeagent: %v\n", err)
		return 2
	}
	if cfg.showVersion {
		fmt.Fprintf(stdout, "edgeagent %s %s/%s %s\n", versionString(), runtime.GOOS, runtime.GOARCH, runtime.Version())
		return 0
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: cfg.logLevel}))
	if cfg.memoryLimit > 0 {
		debug.SetMemoryLimit(cfg.memoryLimit)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	o := cfg.agent
	o.Logger, o.Registerer, o.Gatherer, o.Version = logger, reg, reg, versionString()
	o.Buffer.Logger, o.Buffer.Registerer = logger, reg
	o.Uplink.Logger, o.Uplink.Registerer = logger, reg
	a, err := agent.New(o)
	if err != nil {
		fmt.Fprintf(stderr, "edgeagent: %v\n", explain(err))
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := a.Run(ctx); err != nil {
		logger.Error("edgeagent failed", "err", err)
		return 1
	}
	return 0
}
