package natslog

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestSnapshotCodec(t *testing.T) {
	snap := Snapshot{
		Positions: map[int]uint64{0: 1, 7: 1 << 33, 1023: ^uint64(0)},
		State:     []byte("the hub's state"),
		Taken:     time.Date(2026, 12, 6, 3, 4, 5, 6, time.UTC),
		Hub:       "hub-a",
	}
	b := append(encodeSnapshotHeader(42, &snap), snap.State...)
	got, err := decodeSnapshot(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Generation != 42 || got.Hub != snap.Hub || !got.Taken.Equal(snap.Taken) || !bytes.Equal(got.State, snap.State) || len(got.Positions) != 3 {
		t.Fatalf("decoded %+v, want %+v at generation 42", got, snap)
	}
	for p, seq := range snap.Positions {
		if got.Positions[p] != seq {
			t.Fatalf("partition %d at %d, want %d", p, got.Positions[p], seq)
		}
	}
	// Every truncation and every appended byte is refused; no input panics.
	for n := 0; n < len(b); n++ {
		if _, err := decodeSnapshot(b[:n]); err == nil {
			t.Fatalf("a %d-byte prefix of %d decoded", n, len(b))
		}
	}
	if _, err := decodeSnapshot(append(bytes.Clone(b), 0)); err == nil || !strings.Contains(err.Error(), "state") {
		t.Fatalf("a trailing byte: %v, want the state length named", err)
	}
	for i := range b {
		c := bytes.Clone(b)
		c[i] ^= 0xff
		_, _ = decodeSnapshot(c)
	}
	zero, err := decodeSnapshot(encodeSnapshotHeader(1, &Snapshot{}))
	if err != nil || !zero.Taken.IsZero() || len(zero.Positions) != 0 || len(zero.State) != 0 {
		t.Fatalf("empty snapshot decoded as %+v, %v; want zero Taken, no positions, no state", zero, err)
	}
	c := bytes.Clone(b)
	c[4] = 9
	if _, err := decodeSnapshot(c); err == nil || !strings.Contains(err.Error(), "version 9") {
		t.Fatalf("version 9: %v", err)
	}
}

func TestSnapshotHeadCodec(t *testing.T) {
	entries := []headEntry{
		{gen: 9, size: 100, sum: sha256.Sum256([]byte("a")), name: "snapshot-9"},
		{gen: 8, size: 200, sum: sha256.Sum256([]byte("b")), name: "snapshot-8"},
	}
	b := encodeHead(entries)
	got, err := decodeHead(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != entries[0] || got[1] != entries[1] {
		t.Fatalf("decoded %+v, want %+v", got, entries)
	}
	for n := 0; n < len(b); n++ {
		if _, err := decodeHead(b[:n]); err == nil {
			t.Fatalf("a %d-byte prefix of %d decoded", n, len(b))
		}
	}
	if _, err := decodeHead(encodeHead([]headEntry{entries[1], entries[0]})); err == nil {
		t.Fatal("generations out of order decoded")
	}
	if _, err := decodeHead(append(bytes.Clone(b), 0)); err == nil {
		t.Fatal("a trailing byte decoded")
	}
}

func TestSnapshotOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		edit  func(*SnapshotOptions)
		field string
	}{
		{func(o *SnapshotOptions) { o.Bucket = strings.Repeat("B", 60) }, "Bucket"},
		{func(o *SnapshotOptions) { o.Bucket = "a.b" }, "Bucket"},
		{func(o *SnapshotOptions) { o.Replicas = 6 }, "Replicas"},
		{func(o *SnapshotOptions) { o.MaxBytes = 1000 }, "MaxBytes"},
		{func(o *SnapshotOptions) { o.Keep = -1 }, "Keep"},
	} {
		var o SnapshotOptions
		o.EnsureDefaults()
		if err := o.Validate(); err != nil {
			t.Fatalf("defaults refused: %v", err)
		}
		tc.edit(&o)
		if err := o.Validate(); !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), tc.field) {
			t.Fatalf("got %v, want ErrInvalidOption naming %s", err, tc.field)
		}
	}
	if g, ok := objectGeneration("snapshot-00000000000000000042-0011223344556677"); !ok || g != 42 {
		t.Fatalf("objectGeneration: %d %v", g, ok)
	}
	for _, name := range []string{"other", "snapshot-42-00", "snapshot-0000000000000000004x-00"} {
		if _, ok := objectGeneration(name); ok {
			t.Fatalf("objectGeneration(%q) accepted", name)
		}
	}
}
