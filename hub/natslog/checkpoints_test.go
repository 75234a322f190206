package natslog_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"edgeflow/hub/natslog"
)

// TestCheckpointCompareAndSet saves, replaces and loads a partition's
// checkpoint and checks that a writer holding an old revision (a zombie
// owner) or a second creator is refused without changing the record.
func TestCheckpointCompareAndSet(t *testing.T) {
	_, js, _ := startLog(t, 1, natslog.Options{Replicas: 1})
	testCheckpointCAS(t, js, 1)
}

func testCheckpointCAS(t *testing.T, js jetstream.JetStream, replicas int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	cp, err := natslog.OpenCheckpoints(ctx, js, natslog.CheckpointOptions{Replicas: replicas})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cp.Load(ctx, 3); !errors.Is(err, natslog.ErrNoCheckpoint) {
		t.Fatalf("load before any save: %v, want ErrNoCheckpoint", err)
	}
	r1, err := cp.Save(ctx, 3, 100, []byte("state-a"), 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cp.Save(ctx, 3, 101, []byte("second creator"), 0); !errors.Is(err, natslog.ErrCheckpointConflict) {
		t.Fatalf("second create: %v, want ErrCheckpointConflict", err)
	}
	r2, err := cp.Save(ctx, 3, 200, []byte("state-b"), r1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cp.Save(ctx, 3, 150, []byte("zombie"), r1); !errors.Is(err, natslog.ErrCheckpointConflict) {
		t.Fatalf("save with stale revision %d (current %d): %v, want ErrCheckpointConflict", r1, r2, err)
	}
	got, err := cp.Load(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	if got.Position != 200 || string(got.State) != "state-b" || got.Revision != r2 {
		t.Fatalf("loaded %+v, want position 200, state-b, revision %d", got, r2)
	}
	if _, err := cp.Load(ctx, 4); !errors.Is(err, natslog.ErrNoCheckpoint) {
		t.Fatalf("another partition: %v, want ErrNoCheckpoint", err)
	}
}

// TestCheckpointCorrupt stores a record that is not a checkpoint under a
// partition's key: Load says it is corrupt, names the key, and does not
// return it as state.
func TestCheckpointCorrupt(t *testing.T) {
	_, js, _ := startLog(t, 1, natslog.Options{Replicas: 1})
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	cp, err := natslog.OpenCheckpoints(ctx, js, natslog.CheckpointOptions{Replicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, natslog.DefaultCheckpointBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "partition.5", []byte("xyz")); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.Load(ctx, 5); !errors.Is(err, natslog.ErrCorruptCheckpoint) || !strings.Contains(err.Error(), "partition.5") {
		t.Fatalf("load of a 3-byte record: %v, want ErrCorruptCheckpoint naming the key", err)
	}
	if _, err := cp.Save(ctx, -1, 0, nil, 0); !errors.Is(err, natslog.ErrInvalidOption) {
		t.Fatalf("save of partition -1: %v, want ErrInvalidOption", err)
	}
}
