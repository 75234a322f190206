package demo

import (
	"testing"
	"time"

	"edgeflow/aggregate"
)

func TestScenarioIsValid(t *testing.T) {
	for _, n := range []int{1, 6, 20, 200} {
		sc := Scenario(n, 24*time.Hour)
		sc.EnsureDefaults()
		if err := sc.Validate(); err != nil {
			t.Fatalf("Scenario(%d): %v", n, err)
		}
	}
	sc := Scenario(20, time.Hour)
	last := sc.Classes[len(sc.Classes)-1]
	if last.Name != "catch-up" || len(last.Link.Outages) != 10 || last.Link.Outages[0].At != 45*time.Second {
		t.Fatalf("catch-up class: %+v", last)
	}
}

func TestTuneAggregateKeepsSetFields(t *testing.T) {
	o := TuneAggregate(nil)
	if len(o.Windows) != 2 || o.IdleTimeout != 15*time.Second || o.LateHorizon != time.Minute || o.AllowedLateness != 5*time.Second {
		t.Fatalf("defaults: %+v", o)
	}
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	set := &aggregate.Options{LateHorizon: time.Hour, Windows: []aggregate.WindowConfig{{Name: "w", Kind: "tumbling", Size: time.Minute}}}
	if got := TuneAggregate(set); got.LateHorizon != time.Hour || len(got.Windows) != 1 || got.IdleTimeout != 15*time.Second {
		t.Fatalf("set fields overwritten: %+v", got)
	}
}

func TestDialable(t *testing.T) {
	for in, want := range map[string]string{":1884": "127.0.0.1:1884", "[::]:1884": "127.0.0.1:1884",
		"0.0.0.0:1": "127.0.0.1:1", "10.0.0.2:1883": "10.0.0.2:1883", "host:1": "host:1"} {
		if got := dialable(in); got != want {
			t.Errorf("dialable(%q) = %q, want %q", in, got, want)
		}
	}
}
