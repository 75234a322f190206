package registry

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"
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
