package simulator

import (
	"context"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"edgeflow/aggregate"
	"edgeflow/hub"
)

// startHub runs an in-process hub with its embedded broker on free ports.
func startHub(t *testing.T) *hub.Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	srv, err := hub.New(hub.Options{DataDir: t.TempDir(), HTTPAddr: "127.0.0.1:0", MQTTListen: addr,
		Logger: quietLogger(), Registerer: prometheus.NewRegistry(), Gatherer: prometheus.NewRegistry(),
		Aggregate: &aggregate.Options{Resolution: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := srv.Start(ctx); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		sctx, c2 := context.WithTimeout(context.Background(), 20*time.Second)
		defer c2()
		_ = srv.Shutdown(sctx)
	})
	deadline := time.Now().Add(10 * time.Second)
	for !srv.Ready() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	return srv
}

func quietLogger() *slog.Logger {
	if os.Getenv("FLEETSIM_TEST_LOG") != "" {
		return slog.Default()
	}
	return slog.New(slog.DiscardHandler)
}

// newTestFleet makes a fleet of sc against srv's broker, with quiet logs
// and its data in the test's directory; edit sets further options. The
// fleet is closed when the test ends.
func newTestFleet(t *testing.T, srv *hub.Server, sc Scenario, edit func(*Options)) *Fleet {
	t.Helper()
	o := Options{Scenario: sc, Brokers: []string{"tcp://" + srv.BrokerAddr()}, DataDir: t.TempDir(), Logger: quietLogger()}
	if edit != nil {
		edit(&o)
	}
	f, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestFleetAgainstHub runs 30 devices with outages, a crash, clock drift
// and steps, devices on the hub's time service and devices without a time
// source against an in-process hub, and verifies no loss or duplicate.
func TestFleetAgainstHub(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	srv := startHub(t)
	sc := Scenario{
		Name: "test", Devices: 30, Duration: 6 * time.Second, Resolution: time.Second,
		BoundaryGuard: 100 * time.Millisecond, DrainTimeout: 30 * time.Second,
		Classes: []DeviceClass{
			{Name: "steady", Share: 2, Metrics: []MetricSpec{{Name: "temp", Rate: 20, Min: 10, Max: 30}, {Name: "count", Rate: 5, Shape: ShapeCounter}},
				Clock: ClockSpec{Offset: 3 * time.Second, DriftPPM: 100, WaitSync: 5 * time.Second,
					Steps: []ClockStep{{At: 3 * time.Second, By: 2 * time.Second}}}},
			{Name: "flaky", Share: 1, Metrics: []MetricSpec{{Name: "temp", Rate: 20, Shape: ShapeWalk}},
				Clock: ClockSpec{Offset: time.Second, WaitSync: 5 * time.Second},
				Link:  LinkSpec{Outages: []Outage{{At: time.Second, For: 2 * time.Second}}, Spread: time.Second},
				Crash: CrashSpec{Every: 4 * time.Second, Down: 500 * time.Millisecond}},
			{Name: "hubtime", Share: 1, Metrics: []MetricSpec{{Name: "temp", Rate: 10}},
				Clock: ClockSpec{Offset: time.Minute, TimeSource: TimeHub, WaitSync: 5 * time.Second}},
			{Name: "noclock", Share: 1, Metrics: []MetricSpec{{Name: "temp", Rate: 10}},
				Clock: ClockSpec{Offset: time.Hour, TimeSource: TimeNone,
					PowerLoss: []Outage{{At: 2 * time.Second, Down: 500 * time.Millisecond}}}},
		},
		Uplink: UplinkTuning{BackoffMin: 50 * time.Millisecond, BackoffMax: 500 * time.Millisecond, AckTimeout: 2 * time.Second},
	}
	var reports int
	f := newTestFleet(t, srv, sc, func(o *Options) { o.OnReport = func(Report) { reports++ } })
	rep, err := f.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("report: %+v", rep)
	if rep.Phase != "drained" || rep.Backlog != 0 {
		t.Fatalf("phase %s backlog %d: want drained", rep.Phase, rep.Backlog)
	}
	if rep.Appended == 0 || rep.Acked != rep.Appended {
		t.Fatalf("appended %d acked %d", rep.Appended, rep.Acked)
	}
	if rep.AckLatency.Count == 0 || reports == 0 {
		t.Fatalf("no latency observations (%d) or no progress reports (%d)", rep.AckLatency.Count, reports)
	}
	if rep.AgentStarts <= uint64(sc.Devices) || rep.PowerLosses == 0 {
		t.Errorf("agent starts %d, power losses %d: want crashes and power losses", rep.AgentStarts, rep.PowerLosses)
	}
	if q := f.StampError(); q.Count == 0 || q.P99Ms > 500 {
		t.Errorf("agent stamp error %+v: want measured and p99 under 500 ms (the race detector slows hub time exchanges)", q)
	}
	truth := f.Truth()
	vr, err := Verify(context.Background(), truth, VerifyOptions{HubURL: "http://" + srv.HTTPAddr()})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("verify: lost %d dup %d applied %d of %d, windows %+v, time %+v", vr.Lost, vr.Duplicated, vr.Applied, vr.Events, vr.Windows, vr.TimeError)
	if vr.Lost != 0 || vr.Duplicated != 0 || vr.Applied != vr.Events || vr.Unknown != 0 {
		t.Fatalf("lost %d duplicated %d applied %d of %d unknown devices %d: %v", vr.Lost, vr.Duplicated, vr.Applied, vr.Events, vr.Unknown, vr.LossDevices)
	}
	for _, w := range vr.Windows {
		if !w.Available || w.Differ+w.Missing+w.Unexpected > 0 || w.Match == 0 {
			t.Errorf("window %s %s: %+v", w.Window, w.Metric, w)
		}
	}
	// The noclock devices' windows are unverifiable by design: reported,
	// not a failure.
	if !vr.OK || vr.Windows[0].UnverifiableDevices == 0 {
		t.Errorf("verify not OK (%q) or no unverifiable devices (%d)", vr.Failures, vr.Windows[0].UnverifiableDevices)
	}
	if te := vr.TimeError; !te.Measured || te.Partial || te.Count == 0 {
		t.Errorf("event time error %+v: want measured against the hub's GET /v1/events", te)
	}
}

// TestFleetLinkModelAndProbes runs devices on slow links (latency and
// jitter), devices whose outages are silent (found only by keep-alive),
// booted over a ramp-up, with visibility probes against the hub: nothing
// is lost, the injected delay shows in the steady-state ack latency (a
// batch and its ack each cross the link once), silent outages cost
// reconnects, and probes see events counted in the hub's aggregates.
func TestFleetLinkModelAndProbes(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	srv := startHub(t)
	sc := Scenario{
		Name: "links", Devices: 12, Duration: 8 * time.Second, RampUp: time.Second, Warmup: time.Second,
		Resolution: time.Second, BoundaryGuard: 100 * time.Millisecond, DrainTimeout: 30 * time.Second,
		Classes: []DeviceClass{
			{Name: "far", Metrics: []MetricSpec{{Name: "temp", Rate: 10}},
				Link: LinkSpec{Latency: 60 * time.Millisecond, Jitter: 30 * time.Millisecond}},
			{Name: "cellular", Metrics: []MetricSpec{{Name: "temp", Rate: 10}},
				Link: LinkSpec{Latency: 60 * time.Millisecond, Silent: true, Outages: []Outage{{At: 3 * time.Second, For: 2 * time.Second}}}},
		},
		Uplink: UplinkTuning{BackoffMin: 50 * time.Millisecond, BackoffMax: 500 * time.Millisecond, AckTimeout: 2 * time.Second,
			KeepAlive: time.Second, Linger: 10 * time.Millisecond},
	}
	f := newTestFleet(t, srv, sc, func(o *Options) { o.HubURL, o.ProbeEvery = "http://"+srv.HTTPAddr(), 100*time.Millisecond })
	rep, err := f.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("report: %+v visible %+v", rep, rep.Visible)
	if rep.Phase != "drained" || rep.Acked != rep.Appended || rep.Appended == 0 {
		t.Fatalf("phase %s appended %d acked %d", rep.Phase, rep.Appended, rep.Acked)
	}
	if s := rep.AckLatencySteady; s.Count == 0 || s.P50Ms < 120 {
		t.Fatalf("steady ack latency %+v: want observations, none under 2 x 60 ms", s)
	}
	// The way back crosses the link once: at least its 60 ms, and less
	// than the whole round.
	if b := rep.AckReturn; b.Count == 0 || b.P50Ms < 60 || b.P50Ms >= rep.AckLatencySteady.P50Ms {
		t.Fatalf("ack return leg %+v against the whole %+v: want observations of at least the link's 60 ms, below the whole", b, rep.AckLatencySteady)
	}
	if rep.Reconnects == 0 {
		t.Fatalf("silent outages caused no reconnect")
	}
	if v := rep.Visible; v == nil || v.Latency.Count == 0 || v.Failed != 0 {
		t.Fatalf("visibility probes: %+v", v)
	}
	vr, err := Verify(context.Background(), f.Truth(), VerifyOptions{HubURL: "http://" + srv.HTTPAddr()})
	if err != nil {
		t.Fatal(err)
	}
	if vr.Lost != 0 || vr.Duplicated != 0 || vr.Applied != vr.Events {
		t.Fatalf("lost %d duplicated %d applied %d of %d", vr.Lost, vr.Duplicated, vr.Applied, vr.Events)
	}
}
