// Package demo runs a hub together with a small simulated fleet in one
// process, so that `hubd --demo` shows the whole system working: live
// windows, devices with bad clocks corrected by NTP, by the hub's time
// service or by the hub's own estimate, flaky links whose backlogs arrive
// as late corrections, and one device that goes offline for minutes at a
// time and catches up (part of its backlog beyond late_horizon, so the
// late-events log fills too).
//
// The fleet is package simulator's, driven against the hub's broker like
// any other MQTT client; the hub is an ordinary hub.Server whose event-time
// engine is tuned so that these effects show within a minute or two
// (TuneAggregate).
package demo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"edgeflow/aggregate"
	"edgeflow/hub"
	"edgeflow/simulator"
)

// Options configure a demo. Zero fields take the defaults noted.
type Options struct {
	// Hub is the hub to run. Its Aggregate options are tuned with
	// TuneAggregate (fields the caller set are kept); DataDir "" uses a
	// fresh temporary directory, removed by Stop.
	Hub hub.Options
	// Scenario is the simulated fleet. Default Scenario(20, 24h).
	Scenario *simulator.Scenario
	// FleetDir is the simulated devices' shared buffer directory.
	// Default: a fresh temporary directory, removed by Stop.
	FleetDir string
	// ReadyTimeout bounds the wait for the hub to become ready. Default 30s.
	ReadyTimeout time.Duration
	// Logger receives the demo's messages. Default slog.Default().
	Logger *slog.Logger
}

// Scenario is the demo fleet: devices devices for duration (scenario
// time), about 2.5 events/s each of temp and humidity. Of every 20: 11
// steady devices synced by NTP; 4 with clocks minutes off and drifting,
// synced by the hub's time service, stepped now and then; 2 without a
// time source (the hub applies its own estimate); 2 on flaky links
// (random outages of 20-50 s: their backlogs revise final windows); and 1
// that goes offline for 150 s every 6 minutes, starting 45 s in, and
// catches up (events older than late_horizon go to the late log).
func Scenario(devices int, duration time.Duration) simulator.Scenario {
	metrics := []simulator.MetricSpec{
		{Name: "temp", Rate: 2, Shape: simulator.ShapeSine, Min: 15, Max: 25, Period: 5 * time.Minute},
		{Name: "humidity", Rate: 0.5, Shape: simulator.ShapeWalk, Min: 30, Max: 70},
	}
	var catchUp []simulator.Outage
	for at := 45 * time.Second; at < duration; at += 6 * time.Minute {
		catchUp = append(catchUp, simulator.Outage{At: at, For: 150 * time.Second})
	}
	var steps []simulator.ClockStep
	for at := 2 * time.Minute; at < duration && len(steps) < 1000; at += 7 * time.Minute {
		steps = append(steps, simulator.ClockStep{At: at, By: 90 * time.Second})
	}
	return simulator.Scenario{
		Name: "demo", Devices: devices, DevicePrefix: "demo", Duration: duration, Seed: 7,
		Resolution: 10 * time.Second, DrainTimeout: 30 * time.Second,
		Classes: []simulator.DeviceClass{
			{Name: "steady", Share: 11, Metrics: metrics,
				Clock: simulator.ClockSpec{Offset: 2 * time.Second, DriftPPM: 20, WaitSync: 5 * time.Second}},
			{Name: "bad-clock", Share: 4, Metrics: metrics,
				Clock: simulator.ClockSpec{Offset: 10 * time.Minute, DriftPPM: 300, TimeSource: simulator.TimeHub,
					WaitSync: 10 * time.Second, Steps: steps}},
			{Name: "no-clock", Share: 2, Metrics: metrics,
				Clock: simulator.ClockSpec{Offset: 45 * time.Second, DriftPPM: 50, TimeSource: simulator.TimeNone}},
			{Name: "flaky", Share: 2, Metrics: metrics,
				Clock: simulator.ClockSpec{Offset: time.Second, WaitSync: 5 * time.Second},
				Link: simulator.LinkSpec{Random: simulator.RandomOutages{Every: 2 * time.Minute,
					MinFor: 20 * time.Second, MaxFor: 50 * time.Second}}},
			{Name: "catch-up", Share: 1, Metrics: metrics,
				Clock: simulator.ClockSpec{Offset: 5 * time.Second, DriftPPM: 50, WaitSync: 5 * time.Second},
				Link:  simulator.LinkSpec{Outages: catchUp}},
		},
	}
}

// TuneAggregate sets the engine options that make the demo's effects show
// quickly, where o leaves them zero: windows of 10 s and 1 min, final 5 s
// after the watermark passes their end (the in-flight events of a live
// device are not late corrections), streams idle for 15 s stop holding the
// watermark back (an offline device does not freeze everyone's windows for
// long), and windows take late events for 60 s after they are final (older
// ones go to the late log). A nil o gets a new Options.
func TuneAggregate(o *aggregate.Options) *aggregate.Options {
	if o == nil {
		o = &aggregate.Options{}
	}
	if len(o.Windows) == 0 {
		o.Windows = []aggregate.WindowConfig{
			{Name: "10s", Kind: "tumbling", Size: 10 * time.Second},
			{Name: "1m", Kind: "tumbling", Size: time.Minute},
		}
	}
	if o.AllowedLateness == 0 {
		o.AllowedLateness = 5 * time.Second
	}
	if o.IdleTimeout == 0 {
		o.IdleTimeout = 15 * time.Second
	}
	if o.LateHorizon == 0 {
		o.LateHorizon = time.Minute
	}
	return o
}

// Demo is a running hub and fleet.
type Demo struct {
	// Hub is the running hub.
	Hub *hub.Server
	// Fleet is the simulated fleet, running until Stop.
	Fleet *simulator.Fleet

	log      *slog.Logger
	cancel   context.CancelFunc
	done     chan struct{}
	report   simulator.Report
	runErr   error
	tempDirs []string
	stopOnce sync.Once
	stopErr  error
}

// Start starts the hub, waits until it is ready, then starts the fleet
// against its broker (the embedded one, or Hub.MQTTURL). The fleet runs
// until the scenario ends or Stop.
func Start(ctx context.Context, o Options) (d *Demo, err error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = 30 * time.Second
	}
	if o.Scenario == nil {
		sc := Scenario(20, 24*time.Hour)
		o.Scenario = &sc
	}
	dm := &Demo{log: o.Logger, done: make(chan struct{})}
	d = dm
	defer func() {
		if err != nil {
			dm.removeTemp() // d is nil by now
		}
	}()
	if o.Hub.DataDir == "" {
		if o.Hub.DataDir, err = d.tempDir("edgeflow-demo-hub-"); err != nil {
			return nil, err
		}
	}
	if o.FleetDir == "" {
		if o.FleetDir, err = d.tempDir("edgeflow-demo-fleet-"); err != nil {
			return nil, err
		}
	}
	o.Hub.Aggregate = TuneAggregate(o.Hub.Aggregate)
	if d.Hub, err = hub.New(o.Hub); err != nil {
		return nil, err
	}
	if err := d.startHub(ctx, o.ReadyTimeout); err != nil {
		return nil, errors.Join(err, d.Hub.Shutdown(context.Background()))
	}
	broker := o.Hub.MQTTURL
	if broker == "" {
		broker = "tcp://" + dialable(d.Hub.BrokerAddr())
	}
	d.Fleet, err = simulator.New(simulator.Options{Scenario: *o.Scenario, Brokers: []string{broker},
		DataDir: o.FleetDir, Logger: o.Logger.With("part", "fleet"), ReportEvery: 10 * time.Second})
	if err != nil {
		return nil, errors.Join(err, d.Hub.Shutdown(context.Background()))
	}
	runCtx, cancel := context.WithCancel(context.Background())
	d.cancel = cancel
	go func() {
		defer close(d.done)
		d.report, d.runErr = d.Fleet.Run(runCtx)
	}()
	o.Logger.Info("demo fleet started", "devices", o.Scenario.Devices, "broker", broker, "dashboard", "http://"+dialable(d.Hub.HTTPAddr())+"/")
	return d, nil
}

// startHub starts the hub and waits until it is ready.
func (d *Demo) startHub(ctx context.Context, timeout time.Duration) error {
	if err := d.Hub.Start(ctx); err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	for !d.Hub.Ready() {
		if time.Now().After(deadline) {
			return fmt.Errorf("demo: hub not ready after %v", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// FleetDone is closed when the fleet's run has ended (the scenario is
// over and drained, or Stop was called).
func (d *Demo) FleetDone() <-chan struct{} { return d.done }

// Report returns the fleet's final report; valid after FleetDone.
func (d *Demo) Report() (simulator.Report, error) {
	<-d.done
	return d.report, d.runErr
}

// Stop stops the fleet, then shuts the hub down within ctx, and removes
// the temporary directories Start made. It is safe to call more than once.
func (d *Demo) Stop(ctx context.Context) error {
	d.stopOnce.Do(func() {
		d.cancel()
		<-d.done
		errs := []error{d.runErr, d.Fleet.Close(), d.Hub.Shutdown(ctx)}
		d.removeTemp()
		d.stopErr = errors.Join(errs...)
	})
	return d.stopErr
}

// Run is Start, then Stop once ctx is done; the hub keeps serving after
// the scenario ends until then.
func Run(ctx context.Context, o Options) error {
	d, err := Start(ctx, o)
	if err != nil {
		return err
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return d.Stop(sctx)
}

func (d *Demo) tempDir(pattern string) (string, error) {
	dir, err := os.MkdirTemp("", pattern)
	if err != nil {
		return "", fmt.Errorf("demo: %w", err)
	}
	d.tempDirs = append(d.tempDirs, dir)
	return dir, nil
}

func (d *Demo) removeTemp() {
	for _, dir := range d.tempDirs {
		if err := os.RemoveAll(dir); err != nil {
			d.log.Warn("demo: could not remove a temporary directory", "dir", dir, "err", err)
		}
	}
	d.tempDirs = nil
}

// dialable turns a listen address such as ":1884" or "[::]:1884" into
// one a client can dial on this machine.
func dialable(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}
