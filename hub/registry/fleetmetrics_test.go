package registry

import (
	"maps"
	"testing"
	"time"

	"edgeflow/hub/hubapi"
	"github.com/prometheus/client_golang/prometheus"
)

func TestFleetCollector(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	reg := New(0)
	add := func(id string, events uint64, oldestAgo, offset time.Duration, gaps [][2]uint64) {
		d := reg.device(id)
		d.Backlog = hubapi.Backlog{Events: events}
		if oldestAgo > 0 {
			// the device clock is offset behind true time: oldest is in device time
			d.Backlog.OldestNs = now.Add(-oldestAgo).UnixNano() - int64(offset)
		}
		d.AgentClock = &clockState{OffsetNs: int64(offset), Method: 1}
		s := &streamInfo{}
		for _, g := range gaps {
			s.Gaps.Add(g[0], g[1])
		}
		d.Streams["s"] = s
	}
	add("idle", 0, 0, 0, nil)
	add("live", 3, 2*time.Second, time.Hour, [][2]uint64{{5, 9}})
	add("behind", 500, 20*time.Minute, -time.Minute, nil)
	add("stuck", 9000, 2*time.Hour, 0, [][2]uint64{{1, 100}, {200, 200}})
	r := prometheus.NewRegistry()
	r.MustRegister(NewFleetCollector(reg, func() time.Time { return now }))
	mfs, err := r.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				name += "{" + l.GetName() + "=" + l.GetValue() + "}"
			}
			got[name] = m.GetGauge().GetValue()
		}
	}
	want := map[string]float64{
		"edgeflow_hub_fleet_backlog_events": 9503, "edgeflow_hub_fleet_backlog_oldest_seconds": 7200,
		"edgeflow_hub_devices_backlogged{over=1m}": 2, "edgeflow_hub_devices_backlogged{over=10m}": 2,
		"edgeflow_hub_devices_backlogged{over=1h}": 1, "edgeflow_hub_gap_events": 106,
	}
	if !maps.Equal(got, want) {
		t.Fatalf("got %v\nwant %v", got, want)
	}
}
