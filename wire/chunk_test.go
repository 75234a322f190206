package wire

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/proto"

	"edgeflow/wire/wirepb"
)

// splitBatch returns a batch's header (events left out) and its events,
// each protobuf-encoded as the agent's buffer stores them.
func splitBatch(t testing.TB, in *wirepb.Batch) (*wirepb.Batch, [][]byte) {
	t.Helper()
	hdr := proto.Clone(in).(*wirepb.Batch)
	hdr.Events = nil
	var evs [][]byte
	for _, e := range in.Events {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, b)
	}
	return hdr, evs
}

// A stored chunk framed behind a header is, byte for byte, the frame the
// columnar codec makes of the same batch, and its events come back from
// DecodeChunk as they went in.
func TestColumnChunkIsTheBatchsColumns(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for iter := range 120 {
		n := []int{1, 2, 7, 100, 1000}[iter%5]
		in := randomBatch(rng, n)
		hdr, evs := splitBatch(t, in)
		chunk, ok := AppendColumnChunk([]byte("prefix"), evs)
		if !ok || !bytes.HasPrefix(chunk, []byte("prefix")) {
			t.Fatalf("batch %d: no chunk (ok %v) or dst not kept", iter, ok)
		}
		chunk = chunk[len("prefix"):]
		frame, err := AppendColumnBatch(nil, hdr, chunk)
		if err != nil {
			t.Fatal(err)
		}
		body, err := AppendRawEvents(hdr, evs)
		if err != nil {
			t.Fatal(err)
		}
		if want := columnsFrame(t, body); !bytes.Equal(frame, want) {
			t.Fatalf("batch %d: framed chunk differs from the columnar codec's frame", iter)
		}
		out, err := DecodeBatch(frame, Limits{})
		if err != nil {
			t.Fatal(err)
		}
		sameBatch(t, in, out)

		var c Columns
		if err := c.DecodeChunk(chunk, Limits{}); err != nil {
			t.Fatal(err)
		}
		if c.Len() != n || len(c.Header) != 0 {
			t.Fatalf("batch %d: %d events and a %d-byte header, want %d and none", iter, c.Len(), len(c.Header), n)
		}
		got := &wirepb.Batch{}
		for i := range n {
			e := &wirepb.Event{}
			if err := proto.Unmarshal(c.AppendEventProto(nil, i), e); err != nil {
				t.Fatal(err)
			}
			got.Events = append(got.Events, e)
		}
		want := &wirepb.Batch{Events: in.Events}
		sameBatch(t, want, got)

		var mask uint64
		for _, e := range in.Events {
			mask |= 1 << min(uint64(uint32(e.Method)), 63)
		}
		if m, err := ChunkMethods(chunk); err != nil || m != mask {
			t.Fatalf("batch %d: ChunkMethods %b, %v; want %b", iter, m, err, mask)
		}
	}
}

// ChunkMethods reads both modes of the method column: runs (one method
// throughout) and plain (methods alternating).
func TestChunkMethodsModes(t *testing.T) {
	same := make([]wirepb.TimeMethod, 1000)
	for i := range same {
		same[i] = 2
	}
	for name, methods := range map[string][]wirepb.TimeMethod{
		"runs":                   {1, 1, 1, 1, 1, 1, 1, 1},
		"plain":                  {1, 0, 2, 0, 1, 0, 2, 0},
		"more-events-than-bytes": same,
	} {
		in := readings(len(methods))
		for i, m := range methods {
			in.Events[i].Method = m
			if name == "more-events-than-bytes" {
				in.Events[i].Metric, in.Events[i].Value, in.Events[i].DeviceTimeNs, in.Events[i].MonoNs = "temp", 21.5, int64(i)*1e7, int64(i)*1e7
			}
		}
		_, evs := splitBatch(t, in)
		chunk, ok := AppendColumnChunk(nil, evs)
		if !ok {
			t.Fatal("no chunk")
		}
		if name == "more-events-than-bytes" && len(chunk) >= len(methods) {
			t.Fatalf("%s: a chunk of %d bytes", name, len(chunk))
		}
		want := uint64(0)
		for _, m := range methods {
			want |= 1 << m
		}
		if got, err := ChunkMethods(chunk); err != nil || got != want {
			t.Errorf("%s: %b, %v; want %b", name, got, err, want)
		}
	}
}

// A damaged chunk is an error for DecodeChunk and ChunkMethods, never a
// panic; every truncation of a chunk is one.
func TestChunkTruncated(t *testing.T) {
	_, evs := splitBatch(t, readings(50))
	chunk, ok := AppendColumnChunk(nil, evs)
	if !ok {
		t.Fatal("no chunk")
	}
	var c Columns
	for i := range len(chunk) {
		if err := c.DecodeChunk(chunk[:i], Limits{}); err == nil {
			t.Fatalf("DecodeChunk of %d of %d bytes: no error", i, len(chunk))
		}
		_, _ = ChunkMethods(chunk[:i]) // the method column may end early: no panic is what counts
	}
	if _, err := ChunkMethods([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}); err == nil {
		t.Fatal("ChunkMethods of a bad count: no error")
	}
}

// An event the columns cannot carry leaves no chunk; a header with events
// is refused.
func TestColumnChunkRefuses(t *testing.T) {
	if out, ok := AppendColumnChunk([]byte("x"), [][]byte{{0xff, 0x01}}); ok || string(out) != "x" {
		t.Fatalf("chunk of a non-event: ok %v, dst %q", ok, out)
	}
	if _, err := AppendColumnBatch(nil, readings(1), nil); err == nil {
		t.Fatal("a header with events: no error")
	}
}

// FuzzChunkMethods: any bytes give a mask or an error, never a panic.
func FuzzChunkMethods(f *testing.F) {
	_, evs := splitBatch(f, readings(10))
	chunk, _ := AppendColumnChunk(nil, evs)
	f.Add(chunk)
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = ChunkMethods(b)
		var c Columns
		_ = c.DecodeChunk(b, Limits{})
	})
}

// fitsBody, which settles most batches from the tables alone, agrees with
// the exact bound at every limit around it.
func TestFitsBodyAgreesWithExactBound(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for iter := range 60 {
		in := randomBatch(rng, []int{1, 5, 100, 1000}[iter%4])
		hdr, evs := splitBatch(t, in)
		chunk, ok := AppendColumnChunk(nil, evs)
		if !ok {
			t.Fatal("no chunk")
		}
		frame, err := AppendColumnBatch(nil, hdr, chunk)
		if err != nil {
			t.Fatal(err)
		}
		var c Columns
		if err := c.Decode(frame[headerLen:], Limits{MaxBodyBytes: 1 << 30}); err != nil {
			t.Fatal(err)
		}
		exact := c.protoSizeBound()
		for _, limit := range []int{0, exact / 2, exact - 1, exact, exact + 1, 2 * exact, 1 << 30} {
			if got := c.fitsBody(limit); got != (exact <= limit) {
				t.Fatalf("batch %d: fitsBody(%d) = %v with an exact bound of %d", iter, limit, got, exact)
			}
		}
	}
}
