package simulator

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// TestScenarioHubOutageValidate checks that a bad hub_outage is refused
// with an error naming the key, and a good one accepted.
func TestScenarioHubOutageValidate(t *testing.T) {
	for _, c := range []struct {
		name string
		o    Outage
		want string // "" valid, else a substring of the error
	}{
		{"none", Outage{}, ""},
		{"valid", Outage{At: time.Minute, For: 3 * time.Minute}, ""},
		{"past the end is fine", Outage{At: 9 * time.Minute, For: 5 * time.Minute}, ""},
		{"negative at", Outage{At: -time.Second, For: time.Minute}, "scenario hub_outage: "},
		{"negative for", Outage{At: time.Minute, For: -time.Minute}, "scenario hub_outage: "},
		{"down instead of for", Outage{At: time.Minute, Down: time.Minute}, "scenario hub_outage.down: "},
		{"after the run", Outage{At: 10 * time.Minute, For: time.Minute}, "scenario hub_outage.at: "},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := Scenario{Duration: 10 * time.Minute, HubOutage: c.o}
			s.EnsureDefaults()
			err := s.Validate()
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("Validate: %v, want an error with %q", err, c.want)
			}
		})
	}
}

// TestBuildTimelineHubOutage checks that a hub outage becomes a scaled
// HubDown span, the same for every device, and leaves the links up.
func TestBuildTimelineHubOutage(t *testing.T) {
	s := &Scenario{Duration: time.Hour, TimeScale: 60, HubOutage: Outage{At: 10 * time.Minute, For: 30 * time.Minute}}
	s.EnsureDefaults()
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		tl := BuildTimeline(s, &s.Classes[0], rand.New(rand.NewPCG(1, uint64(i))))
		if want := []Span{{10 * time.Second, 40 * time.Second}}; len(tl.HubDown) != 1 || tl.HubDown[0] != want[0] {
			t.Fatalf("device %d: HubDown %v, want %v", i, tl.HubDown, want)
		}
		if len(tl.LinkDown) != 0 {
			t.Fatalf("device %d: LinkDown %v: a hub outage must not take the link down", i, tl.LinkDown)
		}
	}
}
