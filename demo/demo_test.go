package demo

import (
	"context"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"edgeflow/aggregate"
	"edgeflow/hub"
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

// TestStartFailsCleanly: a hub that cannot start (its MQTT port taken)
// makes Start return an error naming the address and the setting to
// change, not panic, and the temporary directories it made are removed.
func TestStartFailsCleanly(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	_, err = Start(context.Background(), Options{Hub: hub.Options{MQTTListen: ln.Addr().String(), HTTPAddr: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)},
		Logger: slog.New(slog.DiscardHandler)})
	if err == nil || !strings.Contains(err.Error(), ln.Addr().String()) || !strings.Contains(err.Error(), "mqtt-listen") {
		t.Fatalf("Start with its MQTT port taken: %v, want an error naming %s and mqtt-listen", err, ln.Addr())
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Fatalf("temporary directories left behind: %v", left)
	}
}
