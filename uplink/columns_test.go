package uplink

import (
	"context"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"edgeflow/buffer"
	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// openColumnStream is openStream with the buffer storing blocks of events
// as columns, as the edge agent's does.
func openColumnStream(t testing.TB, device string) *buffer.Stream {
	t.Helper()
	_, st := openStreamWith(t, device, buffer.CompressColumns)
	return st
}

// appendBlocks appends one block per size, of events whose method is
// method(seq).
func appendBlocks(t testing.TB, st *buffer.Stream, method func(seq uint64) wirepb.TimeMethod, sizes ...int) {
	t.Helper()
	for _, n := range sizes {
		next := st.Stats().Next
		recs := make([][]byte, n)
		for i := range recs {
			seq := next + uint64(i)
			var e wirepb.Event
			if err := proto.Unmarshal(event(seq), &e); err != nil {
				t.Fatal(err)
			}
			e.Method = method(seq)
			recs[i], _ = proto.Marshal(&e)
		}
		if _, err := st.Append(context.Background(), recs); err != nil {
			t.Fatal(err)
		}
	}
}

func ntp(uint64) wirepb.TimeMethod { return wirepb.TimeMethod_TIME_METHOD_NTP }

// deliver runs an uplink over st against a responder until every event is
// acked, and returns the responder and the uplink's metrics.
func deliver(t *testing.T, st *buffer.Stream, tweak func(*Options)) (*responder, *Metrics) {
	t.Helper()
	url := startMochi(t)
	r := newResponder(t, url, nil)
	m, _ := NewMetrics(nil)
	u := newUplink(t, st, url, func(o *Options) {
		o.MaxBatchEvents, o.Metrics = 100, m
		if tweak != nil {
			tweak(o)
		}
	})
	stop := runUplink(t, u)
	waitFor(t, 15*time.Second, "every event acked", func() bool {
		s := st.Stats()
		return s.Acked == s.Next-1
	})
	stop()
	r.check(t, st.Stats().Next-1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.errs) > 0 {
		t.Fatalf("responder: %v", r.errs)
	}
	return r, m
}

// Blocks the buffer stores as columns go as batches of one block each,
// framed as stored (no encoding), in the columnar codec; every event
// arrives where it belongs.
func TestColumnBlocksSentAsStored(t *testing.T) {
	st := openColumnStream(t, "cols")
	appendBlocks(t, st, ntp, 100, 100, 60, 100, 100)
	r, m := deliver(t, st, nil)
	if got := value(m.BatchesAsStored); got != 5 {
		t.Fatalf("%v batches sent as stored, want all 5", got)
	}
	if want := []int{100, 100, 60, 100, 100}; !slices.Equal(r.batchSizes, want) {
		t.Fatalf("batches of %v events, want the blocks %v", r.batchSizes, want)
	}
	if r.codecs[wire.CodecColumns] != 5 || len(r.codecs) != 1 {
		t.Fatalf("frames by codec: %v", r.codecs)
	}
}

// Blocks that do not fit a batch, or are small while more waits behind
// them, go through the record path, which cuts and joins them; a block of
// half a batch or more starts and ends a batch there, so the blocks after
// it go as stored again. A window of one makes each pass one batch.
func TestColumnBlocksCutAndJoined(t *testing.T) {
	for _, c := range []struct {
		name    string
		sizes   []int
		batches []int
		stored  float64
	}{
		// 150 does not fit: cut at 100, its last 50 alone, then aligned.
		{"realign", []int{150, 100, 100, 100}, []int{100, 50, 100, 100, 100}, 3},
		// Thirty blocks of 5 are joined, and the batch before the block
		// of 100 ends where it starts.
		{"join", append(append([]int{150}, slices.Repeat([]int{5}, 30)...), 100), []int{100, 50, 100, 50, 100}, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := openColumnStream(t, "cols")
			appendBlocks(t, st, ntp, c.sizes...)
			r, m := deliver(t, st, func(o *Options) { o.Window = 1 })
			if !slices.Equal(r.batchSizes, c.batches) {
				t.Fatalf("batches of %v events, want %v", r.batchSizes, c.batches)
			}
			if got := value(m.BatchesAsStored); got != c.stored {
				t.Fatalf("%v batches sent as stored, want %v", got, c.stored)
			}
		})
	}
}

// With a Retime hook, a block holding events stored untrusted goes
// through the record path so the hook can repair them; a block of
// trusted events goes as stored.
func TestColumnBlocksRetimed(t *testing.T) {
	st := openColumnStream(t, "cols")
	untrusted := func(seq uint64) wirepb.TimeMethod {
		if seq == 150 {
			return wirepb.TimeMethod_TIME_METHOD_UNTRUSTED
		}
		return wirepb.TimeMethod_TIME_METHOD_NTP
	}
	appendBlocks(t, st, untrusted, 100, 100, 100)
	calls := 0
	r, m := deliver(t, st, func(o *Options) {
		o.Retime = func(rec []byte) ([]byte, error) {
			calls++
			var e wirepb.Event
			if err := proto.Unmarshal(rec, &e); err != nil {
				return nil, err
			}
			if e.Method != wirepb.TimeMethod_TIME_METHOD_UNTRUSTED {
				return rec, nil
			}
			e.Method = wirepb.TimeMethod_TIME_METHOD_REPAIRED
			return proto.Marshal(&e)
		}
	})
	if got := value(m.BatchesAsStored); got != 2 {
		t.Fatalf("%v batches sent as stored, want the 2 trusted blocks", got)
	}
	if calls != 100 {
		t.Fatalf("Retime called %d times, want once per event of the untrusted block", calls)
	}
	for seq := uint64(1); seq <= 300; seq++ {
		want := wirepb.TimeMethod_TIME_METHOD_NTP
		if seq == 150 {
			want = wirepb.TimeMethod_TIME_METHOD_REPAIRED
		}
		if r.methods[seq] != want {
			t.Fatalf("seq %d arrived with %v, want %v", seq, r.methods[seq], want)
		}
	}
}
