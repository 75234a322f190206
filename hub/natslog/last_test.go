package natslog_test

import (
	"context"
	"fmt"
	"testing"

	"edgeflow/hub/natslog"
)

// TestPartitionLastSeq: each partition's last sequence is that of the
// last batch published for a device of it; a partition without one is 0.
func TestPartitionLastSeq(t *testing.T) {
	_, _, l := startLog(t, 1, natslog.Options{Partitions: 4, Replicas: 1})
	ctx := context.Background()
	want := make([]uint64, 4)
	for i := range 6 {
		dev := fmt.Sprintf("dev-%d", i%3)
		seq, err := l.Publish(ctx, dev, []byte("x"))
		if err != nil {
			t.Fatal(err)
		}
		want[natslog.PartitionOf(dev, 4)] = seq
	}
	// Three devices in four partitions: at least one partition is empty.
	for p := range 4 {
		got, err := l.PartitionLastSeq(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if got != want[p] {
			t.Errorf("partition %d: last seq %d, want %d", p, got, want[p])
		}
	}
	if _, err := l.PartitionLastSeq(ctx, 4); err == nil {
		t.Error("partition 4 of 4: no error")
	}
}
