package simulator

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// fakeTime is a settable true clock.
type fakeTime struct {
	mu sync.Mutex
	t  time.Time
}

func (f *fakeTime) Now() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.t }
func (f *fakeTime) Add(d time.Duration) {
	f.mu.Lock()
	f.t = f.t.Add(d)
	f.mu.Unlock()
}

func TestDeviceClock(t *testing.T) {
	start := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name     string
		offset   time.Duration
		ppm      float64
		after    time.Duration
		step     time.Duration
		wantMono time.Duration
		wantOff  time.Duration // wall - true
	}{
		{"perfect", 0, 0, time.Hour, 0, time.Hour, 0},
		{"offset", 3 * time.Second, 0, time.Minute, 0, time.Minute, 3 * time.Second},
		{"fast 100ppm", 0, 100, time.Hour, 0, time.Hour + 360*time.Millisecond, 360 * time.Millisecond},
		{"slow 50ppm with offset", -time.Second, -50, 1000 * time.Second, 0, 1000*time.Second - 50*time.Millisecond, -time.Second - 50*time.Millisecond},
		{"step", 0, 0, time.Minute, time.Hour, time.Minute, time.Hour},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ft := &fakeTime{t: start}
			c := NewDeviceClock(ft.Now, tc.offset, tc.ppm)
			ft.Add(tc.after)
			c.Step(tc.step)
			tr, mono, wall := c.Read()
			if !tr.Equal(start.Add(tc.after)) {
				t.Fatalf("true time %v", tr)
			}
			if mono != tc.wantMono {
				t.Errorf("mono %v, want %v", mono, tc.wantMono)
			}
			if got := wall.Sub(tr); got != tc.wantOff {
				t.Errorf("offset %v, want %v", got, tc.wantOff)
			}
			if c.Offset() != tc.wantOff || !c.Wall().Equal(wall) || c.Mono() != mono {
				t.Errorf("Offset/Wall/Mono disagree with Read")
			}
		})
	}
}

func TestDeviceClockPowerLoss(t *testing.T) {
	start := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	ft := &fakeTime{t: start}
	c := NewDeviceClock(ft.Now, 5*time.Second, 20)
	ft.Add(time.Hour)
	c.Step(time.Minute)
	if n := c.PowerLoss(); n != 1 || c.Boot() != 1 {
		t.Fatalf("boot %d", n)
	}
	if m := c.Mono(); m != 0 {
		t.Errorf("mono after power loss %v, want 0", m)
	}
	if w := c.Wall(); !w.Equal(time.Unix(0, 0)) {
		t.Errorf("wall after power loss %v, want 1970", w)
	}
	ft.Add(10 * time.Second)
	if w := c.Wall(); w.Year() != 1970 || w.Sub(time.Unix(0, 0)) != 10*time.Second+200*time.Microsecond {
		t.Errorf("wall 10s after power loss %v", w.UTC())
	}
	// WallAt before the boot runs the same oscillator backwards.
	if got := c.WallAt(ft.Now().Add(-10 * time.Second)); !got.Equal(time.Unix(0, 0)) {
		t.Errorf("WallAt boot %v", got)
	}
}

func TestMergeSpansAndIn(t *testing.T) {
	got := MergeSpans([]Span{{5, 8}, {1, 3}, {2, 4}, {8, 9}, {10, 10}, {12, 11}})
	want := []Span{{1, 4}, {5, 9}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("MergeSpans %v, want %v", got, want)
	}
	for _, c := range []struct {
		t  time.Duration
		in bool
	}{{0, false}, {1, true}, {3, true}, {4, false}, {5, true}, {8, true}, {9, false}, {100, false}} {
		if In(got, c.t) != c.in {
			t.Errorf("In(%d) = %v", c.t, !c.in)
		}
	}
}

func TestBuildTimeline(t *testing.T) {
	s := &Scenario{Duration: 10 * time.Hour, TimeScale: 60,
		FleetOutage: Outage{At: 5 * time.Hour, For: 30 * time.Minute},
		Classes: []DeviceClass{{
			Link:  LinkSpec{Outages: []Outage{{At: time.Hour, For: 2 * time.Hour}}, Spread: 10 * time.Minute, Random: RandomOutages{Every: time.Hour, MinFor: time.Minute, MaxFor: time.Hour}},
			Crash: CrashSpec{Every: 2 * time.Hour, Down: 5 * time.Minute},
			Clock: ClockSpec{Steps: []ClockStep{{At: 6 * time.Hour, By: time.Second}, {At: 3 * time.Hour, By: -time.Second}},
				PowerLoss: []Outage{{At: 7 * time.Hour, Down: 10 * time.Minute}}},
		}},
	}
	s.EnsureDefaults()
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	tl := BuildTimeline(s, &s.Classes[0], rand.New(rand.NewPCG(1, 2)))
	// Scaled 60x: the scheduled outage starts 1..1h10m in, i.e. 60..70 s real.
	if !In(tl.LinkDown, 75*time.Second) || !In(tl.LinkDown, 5*time.Minute+15*time.Second) {
		t.Errorf("scheduled or fleet outage missing: %v", tl.LinkDown)
	}
	for i, sp := range tl.LinkDown {
		if sp.To <= sp.From || (i > 0 && sp.From <= tl.LinkDown[i-1].To) {
			t.Fatalf("spans not merged and sorted: %v", tl.LinkDown)
		}
	}
	if len(tl.LinkDown) < 2 {
		t.Errorf("expected random outages as well: %v", tl.LinkDown)
	}
	for _, sp := range tl.AgentDown {
		if sp.To-sp.From != 5*time.Second {
			t.Errorf("crash down %v, want 5m/60 = 5s", sp.To-sp.From)
		}
	}
	if len(tl.PowerDown) != 1 || tl.PowerDown[0] != (Span{7 * time.Minute, 7*time.Minute + 10*time.Second}) {
		t.Errorf("power down %v", tl.PowerDown)
	}
	if len(tl.Steps) != 2 || tl.Steps[0].At != 3*time.Minute || tl.Steps[1].By != time.Second {
		t.Errorf("steps %v: want sorted and scaled", tl.Steps)
	}
	// Same seed, same timeline.
	tl2 := BuildTimeline(s, &s.Classes[0], rand.New(rand.NewPCG(1, 2)))
	if len(tl2.LinkDown) != len(tl.LinkDown) || tl2.LinkDown[0] != tl.LinkDown[0] {
		t.Errorf("timeline not reproducible")
	}
}

func TestPoissonSpansMean(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	spans := poissonSpans(rng, 10000*time.Hour, time.Hour, time.Minute, time.Minute)
	// Mean gap one hour plus one minute of outage each: about 9,840 spans.
	if n := len(spans); n < 9300 || n > 10400 {
		t.Errorf("%d spans in 10000 h with a mean interval of 1 h", n)
	}
}

func TestScenarioValidate(t *testing.T) {
	bad := []struct {
		name  string
		mod   func(*Scenario)
		field string
	}{
		{"devices", func(s *Scenario) { s.Devices = -1 }, "devices"},
		{"time scale", func(s *Scenario) { s.TimeScale = 0.5 }, "time_scale"},
		{"guard", func(s *Scenario) { s.BoundaryGuard = 5 * time.Second }, "boundary_guard"},
		{"shape", func(s *Scenario) { s.Classes[0].Metrics[0].Shape = "square" }, "classes[0].metrics[0].shape"},
		{"time source", func(s *Scenario) { s.Classes[0].Clock.TimeSource = "gps" }, "classes[0].clock.time_source"},
		{"window", func(s *Scenario) { s.Verify.Windows = []string{"tumbling:15s"} }, "verify.windows[0]"},
		{"session", func(s *Scenario) { s.Verify.Windows = []string{"session:30s"} }, "verify.windows[0]"},
		{"random", func(s *Scenario) { s.Classes[0].Link.Random = RandomOutages{Every: time.Hour} }, "link.random"},
		{"ramp up", func(s *Scenario) { s.RampUp = s.Duration }, "ramp_up"},
		{"warmup", func(s *Scenario) { s.RampUp, s.Warmup = s.Duration/2, s.Duration/2 }, "warmup"},
		{"latency", func(s *Scenario) { s.Classes[0].Link.Latency = -time.Second }, "link.latency"},
		{"jitter", func(s *Scenario) { s.Classes[0].Link.Jitter = time.Hour }, "link.jitter"},
		{"compression", func(s *Scenario) { s.Uplink.Compression = "lz4" }, "uplink.compression"},
		{"sync interval", func(s *Scenario) { s.Buffer.SyncInterval = time.Microsecond }, "buffer.sync_interval"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			s := &Scenario{}
			s.EnsureDefaults()
			tc.mod(s)
			err := s.Validate()
			if err == nil || !contains(err.Error(), tc.field) {
				t.Fatalf("Validate() = %v, want an error naming %s", err, tc.field)
			}
		})
	}
	s := &Scenario{}
	s.EnsureDefaults()
	if err := s.Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}
