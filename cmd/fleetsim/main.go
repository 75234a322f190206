// Command fleetsim runs thousands of simulated devices, each with the real
// agent pipeline (shared Badger buffer, clocksync, uplink), against a
// running hubd, reports the load while it runs, and verifies the hub's
// answers against the ground truth at the end.
//
//	fleetsim --scenario configs/fleetsim-steady.yaml --mqtt-url tcp://127.0.0.1:1884 --hub 127.0.0.1:8080
//	fleetsim --devices 50 --rate 2 --duration 30s
//	fleetsim verify --truth truth.gob --hub 127.0.0.1:8080
//	fleetsim verify --truth truth.gob --hub 127.0.0.1:8080,127.0.0.1:8081,127.0.0.1:8082
//
// It exits 1 when verification finds lost or duplicated events, windows
// that differ from the truth, or window kinds it could not check (the hub
// has no GET /v1/aggregates, answers it with an error, or runs another
// resolution; --allow-unavailable-windows accepts those), 2 on any other
// error.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/pflag"

	"edgeflow/internal/debugsrv"
	"edgeflow/simulator"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is main with its outputs injected, for tests; it returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	verifyOnly := len(args) > 0 && args[0] == "verify"
	if len(args) > 0 && (args[0] == "verify" || args[0] == "run") {
		args = args[1:]
	}
	c, err := loadConfig(args)
	if errors.Is(err, pflag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "fleetsim:", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: c.logLevel}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	out := &output{w: stdout, errw: stderr, json: c.json, tty: isTerminal(stderr), allowUnavailable: c.allowUnavailable}
	if verifyOnly {
		return verifyFromFile(ctx, c, out)
	}
	return runFleet(ctx, c, log, out)
}

func runFleet(ctx context.Context, c *config, log *slog.Logger, out *output) int {
	sc := c.scenario
	sc.EnsureDefaults()
	if err := sc.Validate(); err != nil {
		fmt.Fprintln(out.errw, "fleetsim:", err)
		return 2
	}
	hubTime := 0
	for _, cl := range sc.Classes {
		if cl.Clock.TimeSource == simulator.TimeHub {
			hubTime++
		}
	}
	need := uint64(sc.Devices)*uint64(1+min(hubTime, 1)) + 256
	if lim, err := raiseFileLimit(need); err != nil {
		fmt.Fprintln(out.errw, "fleetsim:", err)
		return 2
	} else if lim > 0 {
		log.Debug("open-file limit", "limit", lim)
	}
	dir := c.dataDir
	if dir == "" {
		d, err := os.MkdirTemp("", "fleetsim-")
		if err != nil {
			fmt.Fprintln(out.errw, "fleetsim:", err)
			return 2
		}
		defer os.RemoveAll(d)
		dir = d
	}
	o := simulator.Options{
		Scenario: sc, Brokers: c.mqttURLs, DataDir: dir, Workers: c.workers,
		Logger: log, OnReport: out.progress,
	}
	if c.hub != "" && c.probeEvery > 0 {
		o.HubURL, o.HubURLs, o.ProbeEvery = c.hub, c.hubs[1:], c.probeEvery
	}
	f, err := simulator.New(o)
	if err != nil {
		fmt.Fprintln(out.errw, "fleetsim:", err)
		return 2
	}
	defer f.Close()
	fmt.Fprintln(out.errw, c.gc)
	defer c.gc.apply()()
	metrics := promhttp.HandlerFor(f.Gatherer(), promhttp.HandlerOpts{})
	_, stopDebug, err := debugsrv.Start(c.pprofAddr, log, map[string]http.Handler{"/metrics": metrics})
	if err != nil {
		fmt.Fprintln(out.errw, "fleetsim: flag --pprof-addr:", err)
		return 2
	}
	defer stopDebug()
	rep, err := f.Run(ctx)
	if err != nil {
		fmt.Fprintln(out.errw, "fleetsim:", err)
		return 2
	}
	out.final(rep, f.StampError(), f.AgentDropped())
	truth := f.Truth()
	if c.truthOut != "" {
		if err := saveTruth(c.truthOut, truth); err != nil {
			fmt.Fprintln(out.errw, "fleetsim:", err)
			return 2
		}
	}
	if !c.verify || c.hub == "" || ctx.Err() != nil {
		return 0
	}
	return verify(ctx, c, truth, out)
}

func saveTruth(path string, t *simulator.Truth) error {
	fh, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("truth file: %w", err)
	}
	if err := t.Save(fh); err != nil {
		fh.Close()
		return fmt.Errorf("truth file %s: %w", path, err)
	}
	return fh.Close()
}

func verifyFromFile(ctx context.Context, c *config, out *output) int {
	if c.truthIn == "" || c.hub == "" {
		fmt.Fprintln(out.errw, "fleetsim verify: --truth and --hub are required")
		return 2
	}
	fh, err := os.Open(c.truthIn)
	if err != nil {
		fmt.Fprintln(out.errw, "fleetsim verify:", err)
		return 2
	}
	defer fh.Close()
	t, err := simulator.LoadTruth(fh)
	if err != nil {
		fmt.Fprintln(out.errw, "fleetsim verify:", err)
		return 2
	}
	return verify(ctx, c, t, out)
}

func verify(ctx context.Context, c *config, t *simulator.Truth, out *output) int {
	vctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	vr, err := simulator.Verify(vctx, t, simulator.VerifyOptions{HubURL: c.hub, HubURLs: c.hubs[1:], AllowUnavailable: c.allowUnavailable})
	if err != nil {
		fmt.Fprintln(out.errw, "fleetsim verify:", err)
		return 2
	}
	out.verify(vr)
	if !vr.OK {
		return 1
	}
	return 0
}

// output prints progress and results as text or JSON lines.
type output struct {
	w, errw io.Writer
	json    bool
	tty     bool
	// allowUnavailable is --allow-unavailable-windows, for the hint.
	allowUnavailable bool
}

func (o *output) emit(kind string, v any) {
	b, _ := json.Marshal(map[string]any{"type": kind, kind: v})
	fmt.Fprintln(o.w, string(b))
}

func (o *output) progress(r simulator.Report) {
	if o.json {
		o.emit("progress", r)
		return
	}
	line := fmt.Sprintf("%6.0fs %-5s connected %d/%d  sent %.0f/s  acked %.0f/s  backlog %d  ack p50 %.0fms p99 %.0fms (this interval: p99 %.0fms max %.0fms)",
		r.Elapsed, r.Phase, r.Connected, r.Devices, r.PublishRate, r.AckRate, r.Backlog, r.AckLatency.P50Ms, r.AckLatency.P99Ms,
		r.AckLatencyRecent.P99Ms, r.AckLatencyRecent.MaxMs)
	if v := r.Visible; v != nil {
		if v.Latency.Count > 0 {
			line += fmt.Sprintf("  visible p50 %.0fms p99 %.0fms (%d probes)", v.Latency.P50Ms, v.Latency.P99Ms, v.Latency.Count)
		} else {
			line += "  visible: no probe yet"
		}
	}
	line += fmt.Sprintf("  reconnects %d", r.Reconnects)
	if o.tty {
		fmt.Fprintf(o.errw, "\r\033[K%s", line)
	} else {
		fmt.Fprintln(o.errw, line)
	}
}

func (o *output) final(r simulator.Report, stamp simulator.Quantiles, dropped uint64) {
	if o.tty && !o.json {
		fmt.Fprintln(o.errw)
	}
	if o.json {
		o.emit("report", map[string]any{"load": r, "agent_stamp_error": stamp, "agent_dropped": dropped})
		return
	}
	fmt.Fprintf(o.w, "run %s: %s after %.1fs, %d devices\n", r.Scenario, r.Phase, r.Elapsed, r.Devices)
	fmt.Fprintf(o.w, "  events: appended %d, published %d, acked %d, backlog %d, dropped by agents %d\n", r.Appended, r.Published, r.Acked, r.Backlog, dropped)
	fmt.Fprintf(o.w, "  peak ack rate %.0f events/s; ack latency p50 %.1fms p99 %.1fms max %.1fms (%d events)\n",
		r.PeakAckRate, r.AckLatency.P50Ms, r.AckLatency.P99Ms, r.AckLatency.MaxMs, r.AckLatency.Count)
	fmt.Fprintf(o.w, "  steady state (appended after ramp-up and warm-up): ack latency p50 %.1fms p99 %.1fms max %.1fms (%d events)\n",
		r.AckLatencySteady.P50Ms, r.AckLatencySteady.P99Ms, r.AckLatencySteady.MaxMs, r.AckLatencySteady.Count)
	fmt.Fprintf(o.w, "    of which the way back, from the hub's ack stamp to the device (same-machine clocks only): p50 %.1fms p99 %.1fms max %.1fms (%d acks)\n",
		r.AckReturn.P50Ms, r.AckReturn.P99Ms, r.AckReturn.MaxMs, r.AckReturn.Count)
	if v := r.Visible; v != nil {
		fmt.Fprintf(o.w, "  visible in the hub's aggregate (sampled probes): p50 %.1fms p99 %.1fms max %.1fms (%d probes, %d timed out, %d failed%s)\n",
			v.Latency.P50Ms, v.Latency.P99Ms, v.Latency.MaxMs, v.Latency.Count, v.TimedOut, v.Failed, lastErr(v.LastErr))
	}
	fmt.Fprintf(o.w, "  reconnects %d, connect failures %d, batches resent %d, duplicate acks %d, rejected %d, agent starts %d, power losses %d\n",
		r.Reconnects, r.ConnectFailures, r.Resent, r.DuplicateAcks, r.Rejected, r.AgentStarts, r.PowerLosses)
	fmt.Fprintf(o.w, "  agent stamp error (trusted at capture): p50 %.3fms p99 %.3fms max %.3fms\n", stamp.P50Ms, stamp.P99Ms, stamp.MaxMs)
	if c := r.Catchup; c != nil {
		fmt.Fprintf(o.w, "  catch-up: %d preloaded events, %d acked, in %.1fs = %.0f events/s\n", c.Events, c.Acked, c.Seconds, c.Rate)
	}
}

// lastErr formats a probe error for the report line.
func lastErr(e string) string {
	if e == "" {
		return ""
	}
	return "; last error: " + e
}

func (o *output) verify(v *simulator.VerifyReport) {
	if o.json {
		o.emit("verify", v)
		return
	}
	status := "OK"
	if !v.OK {
		status = "FAILED"
	}
	fmt.Fprintf(o.w, "verify: %s\n", status)
	for _, f := range v.Failures {
		fmt.Fprintf(o.w, "  failed: %s\n", f)
	}
	if v.UnavailableWindows > 0 && !v.OK && !o.allowUnavailable {
		fmt.Fprintf(o.w, "  (%d window kinds could not be checked: --allow-unavailable-windows accepts that)\n", v.UnavailableWindows)
	}
	fmt.Fprintf(o.w, "  devices %d (unknown to hub %d): appended %d, applied %d, lost %d, duplicated %d, gap events reported %d\n",
		v.Devices, v.Unknown, v.Events, v.Applied, v.Lost, v.Duplicated, v.GapReported)
	for _, d := range v.LossDevices {
		fmt.Fprintf(o.w, "    %s\n", d)
	}
	for _, w := range v.Windows {
		if !w.Available {
			fmt.Fprintf(o.w, "  windows %s %s: not available: %s\n", w.Window, w.Metric, w.Note)
			continue
		}
		fmt.Fprintf(o.w, "  windows %s %s: match %d, differ %d, missing %d, unexpected %d (devices not verifiable: %d)\n",
			w.Window, w.Metric, w.Match, w.Differ, w.Missing, w.Unexpected, w.UnverifiableDevices)
		for _, e := range w.Examples {
			fmt.Fprintf(o.w, "    %s\n", e)
		}
	}
	if t := v.TimeError; t.Measured {
		fmt.Fprintf(o.w, "  event time error: p50 %.3fms p99 %.3fms max %.3fms (%d events); within their uncertainty: %d of %d bounded (%.2f%%)%s\n",
			t.P50Ms, t.P99Ms, t.MaxMs, t.Count, t.Covered, t.Bounded, 100*t.Coverage(), noteOf(t.Note))
	} else {
		fmt.Fprintf(o.w, "  event time error: %s\n", t.Note)
	}
}

// noteOf formats a note for the end of a report line.
func noteOf(n string) string {
	if n == "" {
		return ""
	}
	return "; " + n
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
