package registry

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"testing"
	"time"

	"edgeflow/hub/hubapi"
	"edgeflow/hub/hublog"
	"edgeflow/wire/wirepb"
)

// TestSnapshotV1Restores restores a snapshot written by the registry as it
// was when it still lived in package hub (testdata/snapshot_v1.json, with
// the device list that code showed for it in snapshot_v1_devices.json):
// a checkpoint written before must restore to the same devices, and a
// snapshot of the restored registry must be the same bytes.
func TestSnapshotV1Restores(t *testing.T) {
	snap, err := os.ReadFile("testdata/snapshot_v1.json")
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("testdata/snapshot_v1_devices.json")
	if err != nil {
		t.Fatal(err)
	}
	r := New(8)
	if err := r.Restore(snap); err != nil {
		t.Fatalf("restore: %v", err)
	}
	got, err := json.MarshalIndent(r.List(), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if got = append(got, '\n'); !bytes.Equal(got, want) {
		t.Fatalf("devices after restore:\n%s\nwant:\n%s", got, want)
	}
	again, err := r.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again, snap) {
		t.Fatalf("snapshot after restore:\n%s\nwant:\n%s", again, snap)
	}
	if all, online := r.Counts(); all != 3 || online != 1 {
		t.Fatalf("counts %d, %d; want 3, 1", all, online)
	}
	page, next := r.Page("", 2)
	if len(page) != 2 || page[0].ID != "dev-bare" || page[1].ID != "dev-full" || next != "dev-full" {
		t.Fatalf("first page %v, next %q", page, next)
	}
}

// TestRestoreRefusesBadEntries checks that a snapshot naming an invalid
// device id or holding a null entry is refused, and that the registry
// keeps what it held.
func TestRestoreRefusesBadEntries(t *testing.T) {
	r := New(0)
	if err := r.Restore([]byte(`{"dev-a":{"last_seen_ns":1,"backlog":{"events":0,"bytes":0},"streams":{}}}`)); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{`{"dev/x":{"last_seen_ns":1}}`, `{"dev-b":null}`, `{"dev-b":`, `[]`} {
		if err := r.Restore([]byte(bad)); err == nil {
			t.Errorf("restore %s: no error", bad)
		}
	}
	if _, ok := r.Get("dev-a"); !ok || len(r.List()) != 1 {
		t.Fatalf("registry after refused restores: %v", r.List())
	}
}

// TestBufferFill: an online status's buffer figures show on the device
// (with their ratio and the status's server time) and survive a snapshot
// and restore; an offline status's (a last will's, older) leave them, a
// rate that is not a number shows as 0, and a device whose agent reports
// none shows no buffer.
func TestBufferFill(t *testing.T) {
	r := New(8)
	at := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	status := func(online bool, ns int64, b *wirepb.BufferFill) {
		r.ApplyStatus(&hublog.Entry{Device: "pump-1", ServerTimeNs: ns}, &wirepb.Status{Online: online, Buffer: b})
	}
	status(true, at.UnixNano(), &wirepb.BufferFill{CapacityBytes: 1000, UsedBytes: 250, FillRate: 12.5, RateIntervalNs: 5e9})
	status(false, at.Add(time.Minute).UnixNano(), &wirepb.BufferFill{CapacityBytes: 1000, UsedBytes: 10})
	want := hubapi.BufferFill{CapacityBytes: 1000, UsedBytes: 250, Fill: 0.25, FillRate: 12.5, RateIntervalNs: 5e9, ReportedAt: at}
	if d, _ := r.Get("pump-1"); d.Buffer == nil || *d.Buffer != want {
		t.Fatalf("buffer %+v, want %+v", d.Buffer, want)
	}
	snap, err := r.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	r2 := New(8)
	if err := r2.Restore(snap); err != nil {
		t.Fatal(err)
	}
	if d, _ := r2.Get("pump-1"); d.Buffer == nil || *d.Buffer != want {
		t.Fatalf("after restore: buffer %+v, want %+v", d.Buffer, want)
	}
	status(true, at.Add(2*time.Minute).UnixNano(), &wirepb.BufferFill{CapacityBytes: 0, UsedBytes: 7, FillRate: math.Inf(1)})
	d, _ := r.Get("pump-1")
	if b := d.Buffer; b == nil || b.Fill != 0 || b.FillRate != 0 || b.UsedBytes != 7 {
		t.Fatalf("no bound, infinite rate: %+v", b)
	}
	if _, err := json.Marshal(d); err != nil {
		t.Fatalf("device JSON: %v", err)
	}
	r.ApplyStatus(&hublog.Entry{Device: "old-agent", ServerTimeNs: at.UnixNano()}, &wirepb.Status{Online: true})
	if d, _ := r.Get("old-agent"); d.Buffer != nil {
		t.Fatalf("an agent without buffer figures shows %+v", d.Buffer)
	}
}
