package natslog

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"edgeflow/internal/testnats"
)

// TestSnapshotLatestAcrossPrune: with Keep 1, a writer's Put between a
// reader's pointer read and its object read deletes the object the reader
// was about to read; Latest reads the new pointer and returns the new
// generation rather than reporting the snapshot missing.
func TestSnapshotLatestAcrossPrune(t *testing.T) {
	c := testnats.Start(t, 1)
	nc, err := nats.Connect(c.URLs())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opts := SnapshotOptions{Replicas: 1, Keep: 1}
	reader, err := OpenSnapshots(ctx, js, opts)
	if err != nil {
		t.Fatal(err)
	}
	writer, err := OpenSnapshots(ctx, js, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := writer.Put(ctx, Snapshot{State: []byte("one"), Hub: "w"}); err != nil {
		t.Fatal(err)
	}
	puts := 0
	reader.afterHead = func() {
		if puts++; puts == 1 {
			if _, err := writer.Put(ctx, Snapshot{State: []byte("two"), Hub: "w", Generation: 1}); err != nil {
				t.Errorf("put between the reader's pointer and object reads: %v", err)
			}
		}
	}
	got, err := reader.Latest(ctx)
	if err != nil || got.Generation != 2 || string(got.State) != "two" {
		t.Fatalf("latest across a prune: generation %d %q, %v; want generation 2", got.Generation, got.State, err)
	}
	if puts != 2 {
		t.Fatalf("Latest read the pointer %d times, want 2", puts)
	}
	if st := reader.Stats(); st.Unreadable != 0 || st.Fallbacks != 0 {
		t.Fatalf("stats %+v: a pruned generation counted as unreadable", st)
	}

	// Without a writer, a missing object is reported, not retried forever.
	reader.afterHead = nil
	obs, err := js.ObjectStore(ctx, DefaultSnapshotBucket)
	if err != nil {
		t.Fatal(err)
	}
	list, err := obs.List(ctx)
	if err != nil || len(list) != 1 {
		t.Fatalf("bucket holds %d objects (%v), want 1", len(list), err)
	}
	if err := obs.Delete(ctx, list[0].Name); err != nil {
		t.Fatal(err)
	}
	if _, err := reader.Latest(ctx); !errors.Is(err, ErrSnapshotMissing) {
		t.Fatalf("latest with its only object deleted: %v, want ErrSnapshotMissing", err)
	}
}
