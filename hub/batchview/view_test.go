package batchview

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"edgeflow/hub/internal/hubtest"
	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// randomBatch builds a batch with random content, valid or not.
func randomBatch(rng *rand.Rand) *wirepb.Batch {
	sid := wire.NewStreamID()
	b := hubtest.MakeBatch("dev-r", sid, 1+rng.Uint64N(1000), 1+rng.IntN(50))
	for _, e := range b.Events {
		e.Method = wirepb.TimeMethod(rng.IntN(6))
		e.Value = rng.NormFloat64()
		for j := rng.IntN(4); j > 0; j-- {
			e.Tags = append(e.Tags, &wirepb.Tag{Key: "k", Value: string(rune('a' + rng.IntN(26)))})
		}
	}
	if rng.IntN(2) == 0 {
		b.Gaps = append(b.Gaps, &wirepb.Gap{FirstSeq: b.FirstSeq + 100, LastSeq: b.FirstSeq + 200, Reason: "max_bytes"})
	}
	if rng.IntN(3) == 0 {
		b.Clock = nil
	}
	return b
}

// TestBatchViewMatchesWire checks the zero-copy parser against
// wire.DecodeBatch on the same payloads.
func TestBatchViewMatchesWire(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	lim := wire.DefaultLimits
	var v View // reused, as the hub's views are
	columnar := 0
	for i := 0; i < 300; i++ {
		body, err := proto.Marshal(randomBatch(rng))
		if err != nil {
			t.Fatal(err)
		}
		for _, codec := range []wire.Codec{wire.CodecNone, wire.CodecZstd, wire.CodecS2, wire.CodecColumns} {
			payload := wire.FrameWith(wire.MsgBatch, codec, body)
			if wire.Codec(payload[2]) == wire.CodecColumns {
				columnar++
			}
			want, err := wire.DecodeBatch(payload, wire.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			if err := ParseBatchFrame(&v, payload, lim); err != nil {
				t.Fatalf("%v: %v", codec, err)
			}
			compareView(t, &v, want)
		}
	}
	if columnar < 100 { // batches under 512 bytes go plain
		t.Fatalf("only %d of 300 batches went as columns", columnar)
	}
}

// FuzzBatchViewColumns feeds arbitrary columnar bodies to both parsers:
// whatever wire.DecodeBatch accepts the view must accept, with the same
// content.
func FuzzBatchViewColumns(f *testing.F) {
	rng := rand.New(rand.NewPCG(7, 8))
	for range 8 {
		body, err := proto.Marshal(randomBatch(rng))
		if err != nil {
			f.Fatal(err)
		}
		if frame := wire.FrameWith(wire.MsgBatch, wire.CodecColumns, body); wire.Codec(frame[2]) == wire.CodecColumns {
			f.Add(frame[4:])
		}
	}
	lim := wire.DefaultLimits
	f.Fuzz(func(t *testing.T, cols []byte) {
		payload := append([]byte{0xE7, wire.SchemaVersion, byte(wire.CodecColumns), byte(wire.MsgBatch)}, cols...)
		want, werr := wire.DecodeBatch(payload, lim)
		var v View
		verr := ParseBatchFrame(&v, payload, lim)
		if werr != nil {
			return
		}
		if verr != nil {
			if wrongWireType(verr) { // the header is protobuf
				return
			}
			t.Fatalf("wire accepts the columns, the view says %v", verr)
		}
		compareView(t, &v, want)
	})
}

// FuzzBatchViewMatchesWire feeds arbitrary batch bodies to both parsers:
// whatever wire.DecodeBatch accepts the zero-copy parser (with its fast
// paths) must accept too, with the same content, unless a field has the
// wrong wire type.
func FuzzBatchViewMatchesWire(f *testing.F) {
	rng := rand.New(rand.NewPCG(5, 6))
	for range 4 {
		body, err := proto.Marshal(randomBatch(rng))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(body)
	}
	lim := wire.DefaultLimits
	f.Fuzz(func(t *testing.T, body []byte) {
		want, werr := wire.DecodeBatch(wire.FrameWith(wire.MsgBatch, wire.CodecNone, body), lim)
		var v View
		verr := ParseBatchView(&v, body, lim)
		if werr != nil {
			return
		}
		if verr != nil {
			if wrongWireType(verr) {
				return
			}
			t.Fatalf("wire accepts the body, the view says %v", verr)
		}
		compareView(t, &v, want)
	})
}

// wrongWireType reports whether the view rejected a known field with the
// wrong wire type, which Go's protobuf keeps as an unknown field: the one
// difference between the two parsers, and deliberate.
func wrongWireType(err error) bool { return strings.Contains(err.Error(), "has wire type") }

func compareView(t *testing.T, v *View, w *wirepb.Batch) {
	t.Helper()
	if string(v.Device) != w.DeviceId || string(v.StreamID) != string(w.StreamId) || v.FirstSeq != w.FirstSeq ||
		v.SendTimeNs != w.SendTimeNs || v.Len() != len(w.Events) || len(v.Gaps) != len(w.Gaps) ||
		v.HasClock != (w.Clock != nil) || v.HasBacklog != (w.Backlog != nil) || v.RangeAcks != w.RangeAcks {
		t.Fatalf("header differs: view %+v", v)
	}
	if w.Clock != nil && (v.Clock.OffsetNs != w.Clock.OffsetNs || v.Clock.Method != w.Clock.Method) {
		t.Fatalf("clock differs")
	}
	evs := v.EventList()
	if len(evs) != len(w.Events) {
		t.Fatalf("%d events listed, %d in the batch", len(evs), len(w.Events))
	}
	for i, e := range w.Events {
		g := evs[i]
		if string(g.Metric) != e.Metric || math.Float64bits(g.Value) != math.Float64bits(e.Value) || g.DeviceTimeNs != e.DeviceTimeNs || g.MonoNs != e.MonoNs ||
			string(g.BootID) != e.BootId || g.OffsetNs != e.OffsetNs || g.UncertaintyNs != e.UncertaintyNs ||
			g.Method != e.Method || int(g.TagHi-g.TagLo) != len(e.Tags) {
			t.Fatalf("event %d differs: %+v vs %v", i, g, e)
		}
		for j, tg := range e.Tags {
			vt := v.Tags[int(g.TagLo)+j]
			if string(vt.Key) != tg.Key || string(vt.Value) != tg.Value {
				t.Fatalf("event %d tag %d differs", i, j)
			}
		}
	}
	for i, g := range w.Gaps {
		if v.Gaps[i].First != g.FirstSeq || v.Gaps[i].Last != g.LastSeq || string(v.Gaps[i].Reason) != g.Reason {
			t.Fatalf("gap %d differs", i)
		}
	}
}

func TestValidateBatch(t *testing.T) {
	sid := wire.NewStreamID()
	tests := []struct {
		name   string
		topic  string
		mutate func(b *wirepb.Batch)
		want   Reason
	}{
		{"ok", "d1", func(*wirepb.Batch) {}, ""},
		{"device mismatch", "d2", func(*wirepb.Batch) {}, ReasonDeviceMismatch},
		{"short stream id", "d1", func(b *wirepb.Batch) { b.StreamId = b.StreamId[:8] }, ReasonStreamID},
		{"no events", "d1", func(b *wirepb.Batch) { b.Events = nil }, ReasonNoEvents},
		{"first seq 0", "d1", func(b *wirepb.Batch) { b.FirstSeq = 0 }, ReasonFirstSeq},
		{"overflow", "d1", func(b *wirepb.Batch) { b.FirstSeq = math.MaxUint64 - 1 }, ReasonSeqOverflow},
		{"NaN", "d1", func(b *wirepb.Batch) { b.Events[1].Value = math.NaN() }, ReasonValue},
		{"Inf", "d1", func(b *wirepb.Batch) { b.Events[1].Value = math.Inf(-1) }, ReasonValue},
		{"empty metric", "d1", func(b *wirepb.Batch) { b.Events[2].Metric = "" }, ReasonMetric},
		{"1970 trusted", "d1", func(b *wirepb.Batch) { b.Events[0].DeviceTimeNs = 5 }, ReasonTime},
		{"1970 untrusted ok", "d1", func(b *wirepb.Batch) {
			b.Events[0].DeviceTimeNs, b.Events[0].Method = 5, wirepb.TimeMethod_TIME_METHOD_UNTRUSTED
		}, ""},
		{"1970 device clock repaired by the offset", "d1", func(b *wirepb.Batch) {
			b.Events[0].DeviceTimeNs, b.Events[0].OffsetNs = 5, b.Events[0].DeviceTimeNs-5
		}, ""},
		{"send time 1970 repaired by the clock's offset", "d1", func(b *wirepb.Batch) {
			b.SendTimeNs, b.Clock.OffsetNs = 7, b.SendTimeNs-7
		}, ""},
		{"send time 1970 not repaired", "d1", func(b *wirepb.Batch) { b.SendTimeNs = 7 }, ReasonTime},
		{"sum that wraps into range", "d1", func(b *wirepb.Batch) {
			// -8.2e18 - 7.1e18 wraps around to late 2068.
			b.Events[0].DeviceTimeNs, b.Events[0].OffsetNs = math.MinInt64+1e18, -7_100_000_000_000_000_000
		}, ReasonTime},
		{"huge offset", "d1", func(b *wirepb.Batch) { b.Events[0].OffsetNs = math.MaxInt64 }, ReasonTime},
		{"negative uncertainty", "d1", func(b *wirepb.Batch) { b.Events[0].UncertaintyNs = -1 }, ReasonTime},
		{"send time 2300", "d1", func(b *wirepb.Batch) { b.SendTimeNs = math.MaxInt64 }, ReasonTime},
		{"unknown method", "d1", func(b *wirepb.Batch) { b.Events[0].Method = 42 }, ReasonMethod},
		{"inverted gap", "d1", func(b *wirepb.Batch) { b.Gaps = []*wirepb.Gap{{FirstSeq: 9, LastSeq: 8}} }, ReasonGap},
		{"gap over events", "d1", func(b *wirepb.Batch) { b.Gaps = []*wirepb.Gap{{FirstSeq: 1, LastSeq: 12}} }, ReasonGap},
	}
	lim := wire.DefaultLimits
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := hubtest.MakeBatch("d1", sid, 10, 5)
			tt.mutate(b)
			body, err := wire.Unframe(wire.MsgBatch, hubtest.EncodeBatch(t, b), lim)
			if err != nil {
				t.Fatal(err)
			}
			var v View
			if err = ParseBatchView(&v, body, lim); err == nil {
				err = ValidateBatch(&v, tt.topic)
			}
			// The same batch as columns, which the hub checks without
			// building its events: the same verdict, in the same words.
			var cv View
			cerr := ParseBatchFrame(&cv, columnFrame(t, b), lim)
			if cerr == nil {
				cerr = ValidateBatch(&cv, tt.topic)
			}
			if !cv.Columnar || fmt.Sprint(cerr) != fmt.Sprint(err) || fmt.Sprint(cv.Refused) != fmt.Sprint(v.Refused) {
				t.Fatalf("as columns (columnar %v): %v %v; as protobuf: %v %v", cv.Columnar, cerr, cv.Refused, err, v.Refused)
			}
			// A fault of one event refuses that event alone: the batch
			// passes, its view lists the event.
			if err == nil && len(v.Refused) > 0 {
				r := v.Refused[0]
				if len(v.Refused) != 1 || r.Lo != r.Hi || Reason(r.Fault.Reason()) != tt.want {
					t.Fatalf("refused %+v, want one event refused for %s", v.Refused, tt.want)
				}
				return
			}
			if tt.want == "" {
				if err != nil {
					t.Fatalf("unexpected rejection: %v", err)
				}
				return
			}
			if r := AsRejection(err); err == nil || r.Reason != tt.want {
				t.Fatalf("got %v, want %s", err, tt.want)
			}
		})
	}
}

// columnFrame frames b in the columnar codec whatever its size (FrameWith
// sends a short batch as protobuf).
func columnFrame(t *testing.T, b *wirepb.Batch) []byte {
	t.Helper()
	hdr, evs := hubtest.SplitBatch(t, b)
	chunk, ok := wire.AppendColumnChunk(nil, evs)
	if !ok {
		t.Fatal("the batch has no columnar form")
	}
	frame, err := wire.AppendColumnBatch(nil, hdr, chunk)
	if err != nil {
		t.Fatal(err)
	}
	return frame
}
