package natslog_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"edgeflow/hub/natslog"
)

// TestReaderAll: the reader returns, in stream order, each partition's
// messages up to its bound and none of a partition without one; it
// starts at the stream's first retained sequence after a purge, resumes
// from a given sequence, and ends with io.EOF without waiting for more.
func TestReaderAll(t *testing.T) {
	_, js, l := startLog(t, 1, natslog.Options{Partitions: 4, Replicas: 1})
	ctx := context.Background()
	type sent struct {
		seq  uint64
		part int
	}
	var all []sent
	for i := range 40 {
		dev := fmt.Sprintf("dev-%d", i%5)
		seq, err := l.Publish(ctx, dev, []byte(fmt.Sprint(i)))
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, sent{seq, natslog.PartitionOf(dev, 4)})
	}
	// Bounds: partition p up to the sequence of message 10*(p+1), except
	// one partition left out.
	upTo := map[int]uint64{}
	skip := all[0].part
	for p := range 4 {
		if p != skip {
			upTo[p] = all[min(10*(p+1), len(all)-1)].seq
		}
	}
	want := func(from uint64) []uint64 {
		var out []uint64
		for _, s := range all {
			if b, ok := upTo[s.part]; ok && s.seq >= from && s.seq <= b {
				out = append(out, s.seq)
			}
		}
		return out
	}
	read := func(from uint64) []uint64 {
		t.Helper()
		rctx, cancel := context.WithTimeout(ctx, within)
		defer cancel()
		r, err := l.ReaderAll(rctx, from, upTo)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		var got []uint64
		for {
			m, err := r.Next(rctx)
			if errors.Is(err, io.EOF) {
				return got
			}
			if err != nil {
				t.Fatalf("from %d: after %v: %v", from, got, err)
			}
			if b := upTo[m.Partition]; m.Seq > b || m.Partition != natslog.PartitionOf(m.Device, 4) {
				t.Fatalf("message %d of partition %d (device %s) beyond bound %d", m.Seq, m.Partition, m.Device, b)
			}
			got = append(got, m.Seq)
		}
	}
	if got, w := read(0), want(1); !slices.Equal(got, w) {
		t.Fatalf("from the start: %v, want %v", got, w)
	}
	if got, w := read(15), want(15); !slices.Equal(got, w) {
		t.Fatalf("from 15: %v, want %v", got, w)
	}
	stream, err := js.Stream(ctx, natslog.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Purge(ctx, jetstream.WithPurgeSequence(8)); err != nil {
		t.Fatal(err)
	}
	held, err := l.Retained(ctx)
	if err != nil || held.FirstSeq != 8 || held.FirstTime.IsZero() {
		t.Fatalf("after the purge: %+v, %v; want first sequence 8 and its time", held, err)
	}
	if got, w := read(0), want(8); !slices.Equal(got, w) {
		t.Fatalf("after the purge: %v, want %v", got, w)
	}
	// Nothing within the bounds: io.EOF at once.
	if got := read(all[len(all)-1].seq + 1); len(got) != 0 {
		t.Fatalf("past the bounds: %v", got)
	}
	if _, err := l.ReaderAll(ctx, 0, map[int]uint64{4: 1}); !errors.Is(err, natslog.ErrInvalidOption) {
		t.Fatalf("partition 4 of 4: %v", err)
	}
}
