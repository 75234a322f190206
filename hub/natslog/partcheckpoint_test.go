package natslog_test

import (
	"context"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"edgeflow/hub/natslog"
	"edgeflow/internal/testnats"
)

// TestPartitionCheckpointsFencing walks one partition through two owners:
// the old epoch's writes are refused and counted once a newer epoch
// claimed it, and the new owner sees the old owner's last data.
func TestPartitionCheckpointsFencing(t *testing.T) {
	c := testnats.Start(t, 1)
	_, js := connect(t, c.URLs())
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	reg := prometheus.NewRegistry()
	pc, err := natslog.OpenPartitionCheckpoints(ctx, js, natslog.PartitionCheckpointOptions{Replicas: 1, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pc.Load(ctx, 3); !errors.Is(err, natslog.ErrNoCheckpoint) {
		t.Fatalf("Load of a never claimed partition: %v, want ErrNoCheckpoint", err)
	}
	if err := pc.Save(ctx, 3, 10, []byte("x")); !errors.Is(err, natslog.ErrFenced) {
		t.Fatalf("Save before any Claim: %v, want ErrFenced", err)
	}
	if err := pc.Claim(ctx, 3, 10); err != nil {
		t.Fatal(err)
	}
	if err := pc.Claim(ctx, 3, 10); err != nil {
		t.Fatalf("Claim of the current epoch again: %v, want nil", err)
	}
	if err := pc.Save(ctx, 3, 10, []byte("old-1")); err != nil {
		t.Fatal(err)
	}
	// A second handle stands for the new owner's process.
	pc2, err := natslog.OpenPartitionCheckpoints(ctx, js, natslog.PartitionCheckpointOptions{Replicas: 1, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	if err := pc2.Claim(ctx, 3, 25); err != nil {
		t.Fatal(err)
	}
	cp, err := pc2.Load(ctx, 3)
	if err != nil || cp.Epoch != 25 || string(cp.Data) != "old-1" || cp.Released {
		t.Fatalf("Load after the takeover: %+v %v; want epoch 25 with the old owner's data", cp, err)
	}
	// The zombie (its cache still says epoch 10) writes: refused.
	if err := pc.Save(ctx, 3, 10, []byte("zombie")); !errors.Is(err, natslog.ErrFenced) {
		t.Fatalf("zombie Save: %v, want ErrFenced", err)
	}
	if err := pc.Claim(ctx, 3, 10); !errors.Is(err, natslog.ErrFenced) {
		t.Fatalf("zombie Claim: %v, want ErrFenced", err)
	}
	if err := pc.Release(ctx, 3, 10); !errors.Is(err, natslog.ErrFenced) {
		t.Fatalf("zombie Release: %v, want ErrFenced", err)
	}
	if got := pc.FencedWrites(); got != 4 {
		t.Errorf("FencedWrites = %d, want 4 (one unclaimed save and three stale writes)", got)
	}
	if err := pc2.Save(ctx, 3, 25, []byte("new-1")); err != nil {
		t.Fatal(err)
	}
	if err := pc2.Release(ctx, 3, 25); err != nil {
		t.Fatal(err)
	}
	if err := pc2.Save(ctx, 3, 25, []byte("after release")); !errors.Is(err, natslog.ErrFenced) {
		t.Fatalf("Save after Release: %v, want ErrFenced", err)
	}
	cp, err = pc.Load(ctx, 3)
	if err != nil || cp.Epoch != 25 || string(cp.Data) != "new-1" || !cp.Released {
		t.Fatalf("Load after the release: %+v %v; want epoch 25, data new-1, released", cp, err)
	}
	if err := pc.Claim(ctx, 3, 40); err != nil {
		t.Fatal(err)
	}
	cp, _ = pc.Load(ctx, 3)
	if cp.Released || string(cp.Data) != "new-1" {
		t.Fatalf("Claim after a release: %+v, want the data kept and released cleared", cp)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var fenced float64
	for _, mf := range mfs {
		if mf.GetName() == "edgeflow_hub_fenced_writes_total" {
			fenced = mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	if fenced != 5 {
		t.Errorf("edgeflow_hub_fenced_writes_total = %v, want 5 (both handles share it)", fenced)
	}
}

// TestPartitionCheckpointsBadInput: sizes and numbers out of range are
// refused with a reason before anything is written.
func TestPartitionCheckpointsBadInput(t *testing.T) {
	c := testnats.Start(t, 1)
	_, js := connect(t, c.URLs())
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	if _, err := natslog.OpenPartitionCheckpoints(ctx, js, natslog.PartitionCheckpointOptions{Replicas: 9}); !errors.Is(err, natslog.ErrInvalidOption) {
		t.Fatalf("Replicas 9: %v, want ErrInvalidOption", err)
	}
	pc, err := natslog.OpenPartitionCheckpoints(ctx, js, natslog.PartitionCheckpointOptions{Replicas: 1, MaxBytes: 8})
	if err != nil {
		t.Fatal(err)
	}
	if err := pc.Claim(ctx, -1, 1); !errors.Is(err, natslog.ErrInvalidOption) {
		t.Fatalf("partition -1: %v", err)
	}
	if err := pc.Claim(ctx, 0, 0); !errors.Is(err, natslog.ErrInvalidOption) {
		t.Fatalf("epoch 0: %v", err)
	}
	if err := pc.Claim(ctx, 0, 1); err != nil {
		t.Fatal(err)
	}
	if err := pc.Save(ctx, 0, 1, make([]byte, 9)); !errors.Is(err, natslog.ErrPartitionCheckpointTooLarge) {
		t.Fatalf("9 bytes over MaxBytes 8: %v", err)
	}
}
