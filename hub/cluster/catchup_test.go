package cluster

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestCatchUp: not ready until the targets are read and every partition
// has applied up to its target; the lag gauge follows; once caught up it
// stays so.
func TestCatchUp(t *testing.T) {
	lag := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "lag"}, []string{"partition"})
	reg := prometheus.NewRegistry()
	reg.MustRegister(lag)
	lagOf := func(p string) float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				if m.GetLabel()[0].GetValue() == p {
					return m.GetGauge().GetValue()
				}
			}
		}
		t.Fatalf("no lag of partition %s", p)
		return 0
	}
	var c CatchUp
	c.Init(3, map[int]uint64{0: 5, 7: 9}, lag) // partition 7 is out of range: ignored
	if r := c.NotReady(); !strings.Contains(r, "reading each partition's last sequence") {
		t.Fatalf("before the targets: %q", r)
	}
	c.SetTargets([]uint64{5, 10, 0})
	if r := c.NotReady(); r != "catching up with the stream: 1 partitions behind" {
		t.Fatalf("one partition behind: %q", r)
	}
	if v := lagOf("1"); v != 10 {
		t.Fatalf("lag of partition 1: %v, want 10", v)
	}
	c.Applied(1, 9)
	c.Applied(1, 4) // older: ignored
	if v := lagOf("1"); v != 1 || c.NotReady() == "" {
		t.Fatalf("lag of partition 1 at 9: %v, reason %q", v, c.NotReady())
	}
	c.Applied(1, 10)
	if r := c.NotReady(); r != "" {
		t.Fatalf("caught up: %q", r)
	}
	if v := lagOf("1"); v != 0 {
		t.Fatalf("lag of partition 1 caught up: %v", v)
	}
	c.Applied(1, 11)
	if r := c.NotReady(); r != "" {
		t.Fatalf("after caught up: %q", r)
	}
	// A partition whose last message at start was skipped (a subject
	// naming no valid device) catches up once what preceded it is applied.
	var s CatchUp
	s.Init(2, nil, nil)
	s.SetTargets([]uint64{4, 0})
	s.Skipped(0, 4, 3)
	if r := s.NotReady(); r == "" {
		t.Fatal("ready with message 3 not applied")
	}
	s.Applied(0, 3)
	if r := s.NotReady(); r != "" {
		t.Fatalf("after the skipped last message: %q", r)
	}
	var zero CatchUp
	if r := zero.NotReady(); r != "" {
		t.Fatalf("zero value: %q", r)
	}
}
