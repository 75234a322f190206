package clocksync

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"edgeflow/wire/wirepb"
)

// testBoot is the boot id of every simulated device.
const testBoot = "test-boot"

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// newTestClock builds a Clock on the simulated device, polling servers.
func newTestClock(t testing.TB, dev *simClock, servers []string, mutate func(*Options)) *Clock {
	t.Helper()
	o := Options{
		Servers:      servers,
		Wall:         dev.Wall,
		Mono:         dev.Mono,
		BootID:       testBoot,
		QueryTimeout: 300 * time.Millisecond,
		Logger:       testLogger(t),
		Registerer:   prometheus.NewPedanticRegistry(),
	}
	if mutate != nil {
		mutate(&o)
	}
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// pollN runs n rounds interval apart (virtual time) and fails on errors.
func pollN(t testing.TB, c *Clock, dev *simClock, n int, interval time.Duration) {
	t.Helper()
	for i := range n {
		if err := c.Poll(context.Background()); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		dev.Advance(interval)
	}
}

// checkContains asserts the estimate's interval holds the true offset and
// is no wider than maxU.
func checkContains(t testing.TB, c *Clock, ref *refClock, maxU time.Duration) Estimate {
	t.Helper()
	e := c.Estimate()
	if !e.Trusted() {
		t.Fatalf("estimate not trusted: %+v", e)
	}
	truth := ref.trueOffset(e.Mono)
	if err := (e.Offset - truth).Abs(); err > e.Uncertainty {
		t.Errorf("offset %v, true %v: error %v exceeds uncertainty %v", e.Offset, truth, err, e.Uncertainty)
	}
	if e.Uncertainty > maxU {
		t.Errorf("uncertainty %v, want at most %v", e.Uncertainty, maxU)
	}
	return e
}

var day0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func TestSkewAndDrift(t *testing.T) {
	dev := newSimClock(day0)
	ref := newRef(dev, time.Hour, 100)
	srv := startNTP(t, ref.Now, 0)
	c := newTestClock(t, dev, []string{srv.addr}, nil)

	if e := c.Estimate(); e.Trusted() {
		t.Fatalf("trusted before any sample: %+v", e)
	}
	if err := c.Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	e := checkContains(t, c, ref, 10*time.Millisecond)
	if e.Method != wirepb.TimeMethod_TIME_METHOD_NTP || e.Source != srv.addr {
		t.Errorf("method %v source %q, want NTP from %s", e.Method, e.Source, srv.addr)
	}
	pollN(t, c, dev, 40, 64*time.Second)
	e = checkContains(t, c, ref, 5*time.Millisecond)
	if d := e.Drift - 100; d < -2 || d > 2 {
		t.Errorf("drift %.3f ppm, want 100 ± 2", e.Drift)
	}
	// Now is the server's time, within the uncertainty.
	now := c.Now()
	if diff := now.Sub(ref.Now()).Abs(); diff > e.Uncertainty+time.Millisecond {
		t.Errorf("Now is %v off the reference", diff)
	}
}

func TestJitter(t *testing.T) {
	dev := newSimClock(day0)
	ref := newRef(dev, -3*time.Second, -40)
	srv := startNTP(t, ref.Now, 5*time.Millisecond)
	c := newTestClock(t, dev, []string{srv.addr}, nil)
	for i := range 40 {
		if err := c.Poll(context.Background()); err != nil {
			t.Fatal(err)
		}
		// Until the drift is known the uncertainty grows at MaxDriftPPM
		// (32 ms over a 64 s poll); then at DriftBoundPPM (1 ms).
		maxU := 10 * time.Millisecond
		if i < 6 {
			maxU = 45 * time.Millisecond
		}
		checkContains(t, c, ref, maxU)
		dev.Advance(64 * time.Second)
		checkContains(t, c, ref, maxU)
	}
}

func TestLyingServerOutvoted(t *testing.T) {
	dev := newSimClock(day0)
	ref := newRef(dev, 2*time.Second, 20)
	liar := newRef(dev, 7*time.Second, 20)
	a, b := startNTP(t, ref.Now, 0), startNTP(t, ref.Now, 0)
	l := startNTP(t, liar.Now, 0)
	c := newTestClock(t, dev, []string{a.addr, l.addr, b.addr}, nil)
	pollN(t, c, dev, 10, 64*time.Second)
	e := checkContains(t, c, ref, 5*time.Millisecond)
	if e.Source == "" || slices.Contains(strings.Split(e.Source, ","), l.addr) {
		t.Errorf("source %q includes the liar %s", e.Source, l.addr)
	}
	if got := counterValue(c.metrics.samples.WithLabelValues("ntp", "falseticker")); got != 10 {
		t.Errorf("falsetickers counted %v, want 10", got)
	}
}

func TestTwoDisagreeingServersNeedATieBreak(t *testing.T) {
	dev := newSimClock(day0)
	ref := newRef(dev, time.Second, 0)
	liar := newRef(dev, 9*time.Second, 0)
	a, l := startNTP(t, ref.Now, 0), startNTP(t, liar.Now, 0)
	l.mode.Store(int32(modeDrop))
	c := newTestClock(t, dev, []string{a.addr, l.addr}, nil)
	pollN(t, c, dev, 3, 2*time.Second) // only a answers: fit on a
	l.mode.Store(int32(modeNormal))
	pollN(t, c, dev, 3, 2*time.Second) // the fit breaks the tie
	checkContains(t, c, ref, 5*time.Millisecond)

	// A fresh clock with no fit cannot tell which of two is right.
	c2 := newTestClock(t, dev, []string{a.addr, l.addr}, nil)
	if err := c2.Poll(context.Background()); !errors.Is(err, ErrNoMajority) {
		t.Fatalf("Poll = %v, want ErrNoMajority", err)
	}
	if c2.Estimate().Trusted() {
		t.Error("trusted after a round with no majority")
	}
}

func TestUnreachableServer(t *testing.T) {
	dev := newSimClock(day0)
	ref := newRef(dev, 500*time.Millisecond, 10)
	good := startNTP(t, ref.Now, 0)
	dead := startNTP(t, ref.Now, 0)
	dead.mode.Store(int32(modeDrop))
	c := newTestClock(t, dev, []string{dead.addr, good.addr}, func(o *Options) { o.QueryTimeout = 100 * time.Millisecond })
	pollN(t, c, dev, 5, 64*time.Second)
	checkContains(t, c, ref, 5*time.Millisecond)
	if got := counterValue(c.metrics.samples.WithLabelValues("ntp", "error")); got != 5 {
		t.Errorf("errors counted %v, want 5", got)
	}

	// Nothing answers at all: no estimate, and the round says why.
	c2 := newTestClock(t, dev, []string{dead.addr}, func(o *Options) { o.QueryTimeout = 100 * time.Millisecond })
	if err := c2.Poll(context.Background()); !errors.Is(err, ErrNoSource) {
		t.Fatalf("Poll = %v, want ErrNoSource", err)
	}
}

func TestInvalidResponses(t *testing.T) {
	for _, tc := range []struct {
		name     string
		mode     ntpMode
		heldOff  bool // not asked again in the next round
		kissOrNo string
	}{
		{"rate kiss", modeRATE, true, "kiss"},
		{"deny kiss", modeDENY, true, "kiss"},
		{"unsynchronised", modeUnsynced, false, "invalid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dev := newSimClock(day0)
			ref := newRef(dev, time.Second, 0)
			srv := startNTP(t, ref.Now, 0)
			srv.mode.Store(int32(tc.mode))
			c := newTestClock(t, dev, []string{srv.addr}, nil)
			for range 2 {
				if err := c.Poll(context.Background()); !errors.Is(err, ErrNoSource) {
					t.Fatalf("Poll = %v, want ErrNoSource", err)
				}
				dev.Advance(64 * time.Second)
			}
			want := int64(2)
			if tc.heldOff {
				want = 1
			}
			if got := srv.requests.Load(); got != want {
				t.Errorf("server asked %d times, want %d", got, want)
			}
			if got := counterValue(c.metrics.samples.WithLabelValues("ntp", tc.kissOrNo)); got != 1 && got != 2 {
				t.Errorf("%s samples %v", tc.kissOrNo, got)
			}
			if c.Estimate().Trusted() {
				t.Error("trusted from an invalid response")
			}
		})
	}
}

func TestSourceStep(t *testing.T) {
	dev := newSimClock(day0)
	ref := newRef(dev, time.Minute, 30)
	srv := startNTP(t, ref.Now, 0)
	c := newTestClock(t, dev, []string{srv.addr}, nil)
	pollN(t, c, dev, 20, 64*time.Second)
	before := checkContains(t, c, ref, 5*time.Millisecond)

	ref.step.Store(int64(10 * time.Second))
	for i := range c.opts.StepConfirm - 1 {
		if err := c.Poll(context.Background()); !errors.Is(err, ErrSuspect) {
			t.Fatalf("round %d after the step: %v, want ErrSuspect", i, err)
		}
		// The old estimate stands meanwhile.
		if e := c.Estimate(); (e.Offset - before.Offset).Abs() > 100*time.Millisecond {
			t.Fatalf("estimate moved to %v on an unconfirmed step", e.Offset)
		}
		dev.Advance(64 * time.Second)
	}
	if err := c.Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	checkContains(t, c, ref, 50*time.Millisecond)
	if n := len(c.est.window); n != c.opts.StepConfirm {
		t.Errorf("window holds %d samples after the step, want the %d post-step ones", n, c.opts.StepConfirm)
	}
	if got := counterValue(c.metrics.steps.WithLabelValues("source")); got != 1 {
		t.Errorf("source steps %v, want 1", got)
	}
}

func TestWallStep(t *testing.T) {
	dev := newSimClock(day0)
	ref := newRef(dev, 2*time.Second, 50)
	srv := startNTP(t, ref.Now, 0)
	c := newTestClock(t, dev, []string{srv.addr}, nil)
	pollN(t, c, dev, 20, 64*time.Second)
	before := checkContains(t, c, ref, 5*time.Millisecond)
	var ev wirepb.Event
	c.StampEvent(&ev)
	evTrue := ref.at(time.Duration(ev.MonoNs))

	// Someone sets the device clock an hour ahead.
	dev.StepWall(time.Hour)
	after := checkContains(t, c, ref, 5*time.Millisecond)
	if d := after.Offset - before.Offset + time.Hour; d.Abs() > time.Millisecond {
		t.Errorf("offset moved by %v, want -1h", after.Offset-before.Offset)
	}
	if got := counterValue(c.metrics.steps.WithLabelValues("wall")); got != 1 {
		t.Errorf("wall steps %v, want 1", got)
	}
	// The samples are on the monotonic timeline and stay valid.
	if n := len(c.est.window); n != 20 {
		t.Errorf("window holds %d samples, want 20", n)
	}
	// An event stamped before the step keeps its right time.
	if err := time.Duration(ev.DeviceTimeNs + ev.OffsetNs - evTrue).Abs(); err > time.Duration(ev.UncertaintyNs) {
		t.Errorf("event stamped before the step is %v off", err)
	}
	cr := c.Correct(time.Unix(0, ev.DeviceTimeNs), time.Duration(ev.MonoNs), ev.BootId)
	if err := time.Duration(cr.Time.UnixNano() - evTrue).Abs(); err > cr.Uncertainty {
		t.Errorf("event corrected after the step is %v off (± %v)", err, cr.Uncertainty)
	}
}

func TestUncertaintyWidensOffline(t *testing.T) {
	dev := newSimClock(day0)
	ref := newRef(dev, time.Second, 80)
	srv := startNTP(t, ref.Now, 0)
	c := newTestClock(t, dev, []string{srv.addr}, nil)
	pollN(t, c, dev, 30, 64*time.Second)
	fresh := checkContains(t, c, ref, 5*time.Millisecond)

	dev.Advance(time.Hour)
	hour := checkContains(t, c, ref, time.Second)
	// 15 ppm of an hour is 54 ms.
	if grow := hour.Uncertainty - fresh.Uncertainty; grow < 54*time.Millisecond {
		t.Errorf("uncertainty grew by %v in an hour offline, want at least 54ms", grow)
	}
	dev.Advance(10 * 24 * time.Hour) // 15 ppm of 10 days is 13 s > MaxUncertainty
	if e := c.Estimate(); e.Trusted() {
		t.Errorf("still trusted after 10 days offline: %+v", e)
	}
	if now, wall := c.Now(), dev.Wall(); now.Sub(wall).Abs() > time.Millisecond {
		t.Errorf("untrusted Now %v is not the device wall %v", now, wall)
	}
}

func TestRun(t *testing.T) {
	dev := newSimClock(day0)
	ref := newRef(dev, time.Hour, 0)
	srv := startNTP(t, ref.Now, 0)
	c := newTestClock(t, dev, []string{srv.addr}, func(o *Options) {
		o.StartupPollInterval = 5 * time.Millisecond
		o.PollInterval = 10 * time.Millisecond
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	for srv.requests.Load() < 3 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	checkContains(t, c, ref, 10*time.Millisecond)
}

func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		field  string
		mutate func(*Options)
	}{
		{"Servers", func(o *Options) { o.Servers = nil }},
		{"Servers[0]", func(o *Options) { o.Servers = []string{""} }},
		{"PollInterval", func(o *Options) { o.PollInterval = -1 }},
		{"StartupPollInterval", func(o *Options) { o.StartupPollInterval = time.Hour }},
		{"PollJitter", func(o *Options) { o.PollJitter = 0.9 }},
		{"WindowSize", func(o *Options) { o.WindowSize = 2 }},
		{"MaxDriftPPM", func(o *Options) { o.MaxDriftPPM = 1 }},
		{"StepConfirm", func(o *Options) { o.StepConfirm = -1 }},
	} {
		t.Run(tc.field, func(t *testing.T) {
			o := Options{Servers: []string{"127.0.0.1:1"}}
			tc.mutate(&o)
			o.EnsureDefaults()
			err := o.Validate()
			if err == nil {
				t.Fatal("Validate = nil")
			}
			if got := err.Error(); !strings.Contains(got, tc.field) {
				t.Errorf("error %q does not name %s", got, tc.field)
			}
		})
	}
	o := Options{Servers: []string{"pool.ntp.org"}}
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
}

// counterValue reads a counter without prometheus/testutil (whose diff
// dependency is not in go.sum).
func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}
