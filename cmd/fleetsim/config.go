package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"edgeflow/internal/confval"
	"edgeflow/simulator"
)

// config is fleetsim's configuration: the scenario plus what only main uses.
type config struct {
	scenario simulator.Scenario
	hub      string   // hub HTTP API, e.g. http://127.0.0.1:8080 ("" skips verify): the first of hubs
	hubs     []string // --hub's URLs: a cluster's hubs, any of which answers for the whole fleet
	// probeEvery is the period of visibility probes (0: none).
	probeEvery time.Duration
	// mqttURLs are the brokers, from the comma-separated --mqtt-url.
	mqttURLs []string
	dataDir  string
	json     bool
	verify   bool
	truthOut string
	truthIn  string
	workers  int
	logLevel slog.Level
	// pprofAddr serves runtime profiles (package debugsrv); empty: off.
	pprofAddr string
	// gc is how fleetsim's garbage collector runs (--gc-memory).
	gc gcMemory
	// allowUnavailable keeps verification OK when window kinds could not
	// be checked (--allow-unavailable-windows).
	allowUnavailable bool
}

// newFlags declares the flags. --scenario names a YAML file whose keys are
// simulator.Scenario's (snake_case); the other flags override it.
func newFlags() *pflag.FlagSet {
	fs := pflag.NewFlagSet("fleetsim", pflag.ContinueOnError)
	fs.String("scenario", "", "scenario YAML file (configs/fleetsim-*.yaml)")
	fs.Int("devices", 0, "number of devices (overrides the scenario)")
	fs.Float64("rate", 0, "events/s per device and metric (overrides every metric's rate)")
	fs.String("duration", "", "run length in scenario time, e.g. 5m (overrides the scenario)")
	fs.Float64("time-scale", 0, "divide scenario durations by this (overrides the scenario)")
	fs.String("hub", "http://127.0.0.1:8080", "hub HTTP API for verification and probes (\"\" skips them); a cluster's hubs comma-separated: "+
		"each query goes to the first that answers (any hub answers for the whole fleet), so a hub that died is passed over")
	fs.String("mqtt-url", "tcp://127.0.0.1:1884", "MQTT broker(s) the devices connect to, comma-separated; with several, device i starts at the (i mod n)th and fails over to the next")
	fs.String("data-dir", "", "shared buffer directory (default: a new temporary directory, removed at exit)")
	fs.Int("mqtt-ack-qos", 1, "QoS of the devices' ack subscriptions, 0 or 1 (overrides the scenario's uplink.ack_qos)")
	fs.Bool("json", false, "print progress and the final report as JSON lines")
	fs.Bool("verify", true, "query the hub and verify its answers after the run")
	fs.Bool("allow-unavailable-windows", false, "do not fail verification when a window kind cannot be checked (the hub's GET /v1/aggregates is missing, fails, or runs another resolution)")
	fs.String("probe-every", "1s", "period of the probes of event-to-visible-in-aggregate latency (\"0\" or --hub \"\" disables them)")
	fs.String("truth-out", "", "write the ground truth to this file (for the verify subcommand: fleetsim verify --truth FILE)")
	fs.String("truth", "", "ground truth file to verify (the verify subcommand)")
	fs.Int("workers", 0, "goroutines driving the devices (0: min(devices, 64))")
	fs.String("log-level", "warn", "debug, info, warn or error")
	fs.String("gc-memory", gcMemoryAuto, "how fleetsim's garbage collector runs: auto (collect only as the heap nears half the memory available at start, "+
		"so that collections, which stall every simulated device at once, are rare), off (Go's defaults) or a heap limit such as 8GiB")
	fs.String("pprof-addr", "", "serve Go runtime profiles (/debug/pprof/) and the agents' Prometheus metrics (/metrics) on this address, e.g. 127.0.0.1:6061 (empty: off)")
	return fs
}

// loadConfig merges the scenario file < FLEETSIM_* environment < flags.
// Scenario keys (snake_case, nested) come from the file; devices, duration,
// time_scale and uplink.ack_qos may also come from FLEETSIM_DEVICES,
// FLEETSIM_DURATION, FLEETSIM_TIME_SCALE, FLEETSIM_UPLINK_ACK_QOS or the
// flags (--mqtt-ack-qos for the last). Main's keys are flags or
// FLEETSIM_<FLAG> (dashes as underscores).
func loadConfig(args []string) (*config, error) {
	fs := newFlags()
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q: the subcommands are run and verify, and flags start with --", fs.Arg(0))
	}
	vm := viper.New()
	if err := vm.BindPFlags(fs); err != nil {
		return nil, err
	}
	vm.SetEnvPrefix("FLEETSIM")
	vm.SetEnvKeyReplacer(strings.NewReplacer("-", "_"))
	vm.AutomaticEnv()

	vs := viper.New()
	for key, flag := range map[string]string{"devices": "devices", "duration": "duration", "time_scale": "time-scale", "uplink.ack_qos": "mqtt-ack-qos"} {
		if err := vs.BindEnv(key, "FLEETSIM_"+strings.ToUpper(strings.ReplaceAll(key, ".", "_"))); err != nil {
			return nil, err
		}
		if fs.Changed(flag) {
			if err := vs.BindPFlag(key, fs.Lookup(flag)); err != nil {
				return nil, err
			}
		}
	}
	if path := vm.GetString("scenario"); path != "" {
		vs.SetConfigFile(path)
		vs.SetConfigType("yaml")
		if err := vs.ReadInConfig(); err != nil {
			return nil, fmt.Errorf("scenario file %s: %w", path, err)
		}
	}
	return fromViper(vs, vm)
}

// fromViper decodes the scenario strictly (an unknown key is an error that
// names it) and reads main's keys.
func fromViper(vs, vm *viper.Viper) (*config, error) {
	c := &config{}
	// viper's own hooks plus durations that refuse a bare number (the
	// default hook would take 5 as 5ns).
	hook := viper.DecodeHook(mapstructure.ComposeDecodeHookFunc(confval.DurationHook, mapstructure.StringToSliceHookFunc(",")))
	if err := vs.UnmarshalExact(&c.scenario, hook); err != nil {
		if keyed := scenarioKeyErrors(err); keyed != nil {
			return nil, keyed
		}
		return nil, fmt.Errorf("scenario: %w (keys are snake_case, see configs/fleetsim-steady.yaml)", err)
	}
	for _, h := range strings.Split(vm.GetString("hub"), ",") {
		if h = strings.TrimSpace(h); h != "" {
			if !strings.Contains(h, "://") {
				h = "http://" + h
			}
			c.hubs = append(c.hubs, h)
		}
	}
	if len(c.hubs) > 0 {
		c.hub = c.hubs[0]
	}
	for _, u := range strings.Split(vm.GetString("mqtt-url"), ",") {
		if u = strings.TrimSpace(u); u != "" {
			c.mqttURLs = append(c.mqttURLs, u)
		}
	}
	c.dataDir = vm.GetString("data-dir")
	c.json = vm.GetBool("json")
	c.verify = vm.GetBool("verify")
	c.allowUnavailable = vm.GetBool("allow-unavailable-windows")
	c.truthOut, c.truthIn = vm.GetString("truth-out"), vm.GetString("truth")
	c.workers = vm.GetInt("workers")
	c.pprofAddr = vm.GetString("pprof-addr")
	k := &confval.Keys{Get: vm.Get, Flags: true} // main's keys are flags, never in the scenario file
	gc, err := parseGCMemory(vm.GetString("gc-memory"), os.Getenv, availableMemory)
	k.Add(err)
	c.gc = gc
	switch d := k.Duration("probe-every", true); {
	case d > 0 && d < 10*time.Millisecond:
		k.Fail("probe-every", "%v is not a duration of at least 10ms (or 0)", d)
	case d > 0:
		c.probeEvery = d
	}
	c.logLevel = k.LogLevel("log-level")
	if rate := vm.GetFloat64("rate"); rate != 0 {
		c.scenario.EnsureDefaults()
		for i := range c.scenario.Classes {
			for j := range c.scenario.Classes[i].Metrics {
				c.scenario.Classes[i].Metrics[j].Rate = rate
			}
		}
	}
	if len(c.mqttURLs) == 0 {
		k.Fail("mqtt-url", "required")
	}
	return c, k.Err()
}

// scenarioKeyErrors rewrites the decoder's errors as one line per key
// (`scenario key "duration": 5 has no unit; ...`); nil when err holds no
// decoder error.
func scenarioKeyErrors(err error) error {
	var out []error
	var walk func(error)
	walk = func(e error) {
		var de *mapstructure.DecodeError
		switch u := e.(type) {
		case interface{ Unwrap() []error }:
			for _, x := range u.Unwrap() {
				walk(x)
			}
		case *mapstructure.DecodeError:
			if inner := u.Unwrap(); errors.As(inner, &de) {
				walk(inner)
			} else if u.Name() == "" {
				out = append(out, fmt.Errorf("scenario: %w (keys are snake_case, see configs/fleetsim-steady.yaml)", inner))
			} else {
				out = append(out, fmt.Errorf("scenario key %q: %w", u.Name(), inner))
			}
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		}
	}
	walk(err)
	return errors.Join(out...)
}
