package buffer

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := openTest(t, t.TempDir(), Options{Registerer: reg})
	st, _ := s.Stream("d", StreamOptions{MaxBytes: 4096})
	ctx := context.Background()
	for i := 0; i < 10; i++ {
		st.Append(ctx, [][]byte{make([]byte, 1000)})
	}
	st.Ack(st.Stats().Head)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		m := mf.GetMetric()[0]
		if h := m.GetHistogram(); h != nil {
			got[mf.GetName()] = float64(h.GetSampleCount())
		} else if m.GetCounter() != nil {
			got[mf.GetName()] = m.GetCounter().GetValue()
		} else {
			got[mf.GetName()] = m.GetGauge().GetValue()
		}
	}
	stats := st.Stats()
	want := map[string]float64{
		"edgeflow_buffer_appended_events_total": 10,
		"edgeflow_buffer_dropped_events_total":  float64(stats.Dropped),
		"edgeflow_buffer_acked_events_total":    1,
		"edgeflow_buffer_depth_events":          float64(stats.Depth),
		"edgeflow_buffer_bytes":                 float64(stats.Bytes),
		"edgeflow_buffer_streams":               1,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if stats.Dropped == 0 || got["edgeflow_buffer_oldest_unacked_age_seconds"] < 0 {
		t.Errorf("stats %+v, metrics %v", stats, got)
	}
}

// In sync mode every commit group is synced, and each sync is timed.
func TestSyncMetric(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := openTest(t, t.TempDir(), Options{Registerer: reg, Durability: DurabilitySync})
	st, _ := s.Stream("d", StreamOptions{})
	for range 3 {
		if _, err := st.Append(context.Background(), [][]byte{make([]byte, 100)}); err != nil {
			t.Fatal(err)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "edgeflow_buffer_sync_seconds" {
			// Appends one after another: one group (and sync) each.
			if n := mf.GetMetric()[0].GetHistogram().GetSampleCount(); n != 3 {
				t.Fatalf("edgeflow_buffer_sync_seconds counts %d syncs after 3 appends in sync mode, want 3", n)
			}
			return
		}
	}
	t.Fatal("no edgeflow_buffer_sync_seconds")
}
