package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"edgeflow/wire/wirepb"
)

// randomBatch makes a batch whose events vary in every way the columns
// encode: strings (empty ones included), tag sets, clocks that step and
// wrap, values decimal, raw and odd (negative zero, NaN, infinities,
// subnormals), and methods outside the enum.
func randomBatch(rng *rand.Rand, n int) *wirepb.Batch {
	id := NewStreamID()
	b := &wirepb.Batch{DeviceId: "dev-r", StreamId: id[:], FirstSeq: rng.Uint64N(1 << 40), SendTimeNs: rng.Int64(),
		Gaps:  []*wirepb.Gap{{FirstSeq: 1, LastSeq: 2, Reason: "max_age"}},
		Clock: &wirepb.ClockEstimate{OffsetNs: -5, UncertaintyNs: 7, DriftPpm: 1.5}}
	metrics := []string{"temp", "", "rh", "a-much-longer-metric-name.with.dots"}
	tagSets := [][]*wirepb.Tag{nil, {{Key: "rm", Value: "b2"}}, {{Key: "k", Value: ""}, {Key: "", Value: "v"}}, {{Key: "rm", Value: "b3"}, {Key: "fl", Value: "2"}}}
	decimals := rng.IntN(4) // most batches share a scale; some events break it
	t, mono := rng.Int64(), rng.Int64()
	v := rng.NormFloat64() * 100
	for i := range n {
		d := int64(10e6) + rng.Int64N(1e5)
		switch rng.IntN(50) {
		case 0:
			d = -rng.Int64() // a clock step, wrapping
		case 1:
			d = 0
		}
		t += d
		mono += d + rng.Int64N(3) - 1
		if rng.IntN(40) == 0 {
			mono = rng.Int64()
		}
		v += rng.NormFloat64()
		val := math.Round(v*pow10[decimals]) / pow10[decimals]
		switch rng.IntN(60) {
		case 0:
			val = math.Copysign(0, -1)
		case 1:
			val = math.NaN()
		case 2:
			val = math.Inf(-1)
		case 3:
			val = 5e-324
		case 4:
			val = rng.Float64() // many digits: no decimal scale fits
		case 5:
			val = 1e300
		}
		e := &wirepb.Event{Metric: metrics[rng.IntN(len(metrics))], Value: val, Tags: tagSets[rng.IntN(len(tagSets))],
			DeviceTimeNs: t, MonoNs: mono, BootId: []string{"boot-1", "boot-2", ""}[i*3/max(n, 1)],
			OffsetNs: rng.Int64N(1e6) - 5e5, UncertaintyNs: []int64{0, 1500, 1500, 1500}[rng.IntN(4)],
			Method: wirepb.TimeMethod([]int32{0, 1, 2, -3, 77}[rng.IntN(5)])}
		if rng.IntN(3) == 0 {
			e.OffsetNs = 0
		}
		b.Events = append(b.Events, e)
	}
	return b
}

// sameBatch compares batches as protobuf does, except that NaN values
// compare equal by their bits.
func sameBatch(t *testing.T, want, got *wirepb.Batch) {
	t.Helper()
	if len(want.Events) != len(got.Events) {
		t.Fatalf("%d events, want %d", len(got.Events), len(want.Events))
	}
	w, g := proto.Clone(want).(*wirepb.Batch), proto.Clone(got).(*wirepb.Batch)
	for i := range w.Events {
		if a, b := math.Float64bits(w.Events[i].Value), math.Float64bits(g.Events[i].Value); a != b {
			t.Fatalf("event %d: value bits %x, want %x", i, b, a)
		}
		w.Events[i].Value, g.Events[i].Value = 0, 0
	}
	if !proto.Equal(w, g) {
		for i := range w.Events {
			if !proto.Equal(w.Events[i], g.Events[i]) {
				t.Fatalf("event %d: got %v, want %v", i, g.Events[i], w.Events[i])
			}
		}
		t.Fatal("batch headers differ")
	}
}

// columnsFrame frames a batch body in the columnar codec whatever its size
// (FrameWith sends a short body plain).
func columnsFrame(t testing.TB, body []byte) []byte {
	out, ok := appendColumns([]byte{frameMagic, SchemaVersion, byte(CodecColumns), byte(MsgBatch)}, body)
	if !ok {
		t.Fatal("the batch has no columnar form")
	}
	return out
}

// Every batch the columns can carry round-trips exactly, through
// DecodeBatch (protobuf rewriting) and Columns.Decode alike.
func TestColumnsRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := range 300 {
		n := []int{0, 1, 2, 7, 100, 1000}[iter%6]
		in := randomBatch(rng, n)
		body, err := proto.MarshalOptions{Deterministic: true}.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		frame := columnsFrame(t, body)
		if n >= 100 {
			if f := FrameWith(MsgBatch, CodecColumns, body); Codec(f[2]) != CodecColumns {
				t.Fatalf("batch %d: framed with %v", iter, Codec(f[2]))
			}
		}
		out, err := DecodeBatch(frame, Limits{})
		if err != nil {
			t.Fatalf("batch %d (%d events): %v", iter, n, err)
		}
		sameBatch(t, in, out)

		cb, columnar, err := UnframeBatch(frame, Limits{})
		if err != nil || !columnar {
			t.Fatalf("UnframeBatch: columnar %v, %v", columnar, err)
		}
		var c Columns
		if err := c.Decode(cb, Limits{}); err != nil {
			t.Fatal(err)
		}
		if c.Len() != n {
			t.Fatalf("Len %d, want %d", c.Len(), n)
		}
		for i, e := range in.Events {
			if string(c.Strings[c.Metric[i]]) != e.Metric || c.Time[i] != e.DeviceTimeNs || c.Mono[i] != e.MonoNs ||
				c.Offset[i] != e.OffsetNs || c.Uncertainty[i] != e.UncertaintyNs || int32(c.Method[i]) != int32(e.Method) ||
				string(c.Strings[c.Boot[i]]) != e.BootId || math.Float64bits(c.Value[i]) != math.Float64bits(e.Value) {
				t.Fatalf("batch %d event %d: columns differ from %v", iter, i, e)
			}
			tags := c.Tags[c.SetStart[c.TagSet[i]]:c.SetStart[c.TagSet[i]+1]]
			if len(tags) != len(e.Tags) {
				t.Fatalf("event %d: %d tags, want %d", i, len(tags), len(e.Tags))
			}
			for j, tg := range tags {
				if string(c.Strings[tg.Key]) != e.Tags[j].Key || string(c.Strings[tg.Value]) != e.Tags[j].Value {
					t.Fatalf("event %d tag %d differs", i, j)
				}
			}
		}
	}
}

// A batch of readings, as the end-to-end benchmark sends them: the columns
// are smaller than zstd makes the protobuf body, and scale values as
// decimals.
func TestColumnsSize(t *testing.T) {
	body, _ := proto.Marshal(readings(1000))
	cols, zstd := FrameWith(MsgBatch, CodecColumns, body), FrameWith(MsgBatch, CodecZstd, body)
	t.Logf("protobuf %d bytes, zstd %d, columns %d", len(body), len(zstd), len(cols))
	if len(cols) >= len(zstd) {
		t.Fatalf("columns %d bytes, zstd %d", len(cols), len(zstd))
	}
	cb, _, _ := UnframeBatch(cols, Limits{})
	// version, header length, header, count, strings, sets, then the
	// columns: the value column's mode byte follows the integer columns.
	var c Columns
	if err := c.Decode(cb, Limits{}); err != nil {
		t.Fatal(err)
	}
	if k, ok := (&colEncoder{values: c.Value}).decimals(); !ok || k != 2 {
		t.Fatalf("values scale by 10^%d (%v), want 10^2", k, ok)
	}
}

// readings is a batch of n sensor readings shaped like the end-to-end
// benchmark's: four metrics in turn, one tag, a noisy value with two
// decimals, clocks about 10 ms apart with jitter.
func readings(n int) *wirepb.Batch {
	rng := rand.New(rand.NewPCG(3, 4))
	id := NewStreamID()
	in := &wirepb.Batch{DeviceId: "bench-0", StreamId: id[:], FirstSeq: 1, SendTimeNs: 1_800_000_000_000_000_000}
	v, tm := 20.0, int64(1_800_000_000_000_000_000)
	for i := range n {
		v += rng.NormFloat64() * 0.3
		tm += 10e6 + rng.Int64N(1e5)
		in.Events = append(in.Events, &wirepb.Event{Metric: []string{"temp", "rh", "co2", "pm25"}[i%4], Value: math.Round(v*100) / 100,
			Tags: []*wirepb.Tag{{Key: "rm", Value: "b2"}}, DeviceTimeNs: tm, MonoNs: tm - 1e15, Method: wirepb.TimeMethod_TIME_METHOD_NTP})
	}
	return in
}

// An event the columns cannot carry exactly sends the batch with zstd,
// and the batch still round-trips.
func TestColumnsFallBack(t *testing.T) {
	in := sampleBatch(20)
	for name, mutate := range map[string]func([]byte) []byte{
		"unknown field": func(ev []byte) []byte {
			return protowire.AppendVarint(protowire.AppendTag(ev, 15, protowire.VarintType), 3)
		},
		"metric twice": func(ev []byte) []byte {
			return protowire.AppendString(protowire.AppendTag(ev, 1, protowire.BytesType), "again")
		},
		"tags apart": func(ev []byte) []byte {
			ev = protowire.AppendTag(ev, 3, protowire.BytesType)
			return protowire.AppendBytes(ev, []byte{0x0a, 1, 'k'})
		},
		"tag with an unknown field": func(ev []byte) []byte {
			var e wirepb.Event
			_ = proto.Unmarshal(ev, &e)
			e.Tags = nil
			ev, _ = proto.Marshal(&e)
			ev = protowire.AppendTag(ev, 3, protowire.BytesType)
			return protowire.AppendBytes(ev, []byte{0x18, 1})
		},
		"value as a varint": func(ev []byte) []byte {
			var e wirepb.Event
			_ = proto.Unmarshal(ev, &e)
			e.Value = 0
			ev, _ = proto.Marshal(&e)
			return protowire.AppendVarint(protowire.AppendTag(ev, 2, protowire.VarintType), 1)
		},
	} {
		hdr := proto.Clone(in).(*wirepb.Batch)
		hdr.Events = nil
		var raw [][]byte
		for i, e := range in.Events {
			b, _ := proto.Marshal(e)
			if i == 7 {
				b = mutate(b)
			}
			raw = append(raw, b)
		}
		body, err := AppendRawEvents(hdr, raw)
		if err != nil {
			t.Fatal(err)
		}
		frame := FrameWith(MsgBatch, CodecColumns, body)
		if Codec(frame[2]) != CodecZstd {
			t.Fatalf("%s: framed with %v, want zstd", name, Codec(frame[2]))
		}
		if _, err := DecodeBatch(frame, Limits{}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	// Other messages never use the columns.
	ack, _ := proto.Marshal(&wirepb.Ack{FirstSeq: 1, LastSeq: 2, Reason: "x"})
	if f := FrameWith(MsgAck, CodecColumns, ack); Codec(f[2]) == CodecColumns {
		t.Fatal("an ack was framed as columns")
	}
	f := []byte{frameMagic, SchemaVersion, byte(CodecColumns), byte(MsgAck), 1}
	if _, err := DecodeAck(f, Limits{}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("an ack in the columnar codec: %v", err)
	}
}

// colBody builds a columnar body by hand for the rejection cases.
func colBody(parts ...[]byte) []byte {
	out := []byte{frameMagic, SchemaVersion, byte(CodecColumns), byte(MsgBatch)}
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func uv(vs ...uint64) []byte {
	var b []byte
	for _, v := range vs {
		b = protowire.AppendVarint(b, v)
	}
	return b
}

// Every count and index in a columnar body is checked, and a small body
// cannot stand for a batch larger than the body limit.
func TestColumnsRejects(t *testing.T) {
	// One event: header empty, strings "" and "m", one empty tag set, and
	// plain columns.
	cols := func(metric uint64) []byte {
		return colBody(uv(colsVersion, 0, 1, 2, 0, 1, 'm', 1, 0), uv(colPlain, metric, colPlain, 0, colPlain, 0,
			colPlain, 0, colPlain, 0, colPlain, 0, colPlain, 0, colPlain, 0), []byte{valRaw, 0, 0, 0, 0, 0, 0, 0, 0})
	}
	if b, err := DecodeBatch(cols(1), Limits{}); err != nil || b.Events[0].Metric != "m" {
		t.Fatalf("the valid hand-made body: %v, %v", b, err)
	}
	long := make([]byte, 300)
	for name, tc := range map[string]struct {
		frame []byte
		lim   Limits
		want  error
	}{
		"index out of range": {cols(2), Limits{}, ErrMalformed},
		"unknown version":    {colBody(uv(9)), Limits{}, ErrVersion},
		"too many events":    {colBody(uv(colsVersion, 0, 5)), Limits{MaxEvents: 4}, ErrTooLarge},
		"long string":        {colBody(uv(colsVersion, 0, 1, 1, 300), long), Limits{}, ErrTooLarge},
		"string count":       {colBody(uv(colsVersion, 0, 1, 1000)), Limits{}, ErrMalformed},
		"too many tags":      {colBody(uv(colsVersion, 0, 1, 1, 0, 1, 65)), Limits{}, ErrTooLarge},
		"header with events": {colBody(uv(colsVersion, 2, 0x22, 0, 0)), Limits{}, ErrMalformed},
		"short run":          {colBody(uv(colsVersion, 0, 3, 1, 0, 1, 0), uv(colRuns, 1, 0, 2)), Limits{}, ErrMalformed},
		"long run":           {colBody(uv(colsVersion, 0, 3, 1, 0, 1, 0), uv(colRuns, 1, 0, 4)), Limits{}, ErrMalformed},
		"unknown mode":       {colBody(uv(colsVersion, 0, 1, 1, 0, 1, 0), uv(7)), Limits{}, ErrMalformed},
		"trailing bytes":     {append(cols(1), 0), Limits{}, ErrMalformed},
		"truncated":          {cols(1)[:20], Limits{}, ErrMalformed},
		// 100,000 events, all in runs, each with 64 tags of 256-byte strings:
		// a few kilobytes that stand for gigabytes of protobuf.
		"expands too far": {func() []byte {
			set := uv(64)
			for range 64 {
				set = append(set, uv(0, 0)...)
			}
			b := colBody(uv(colsVersion, 0, 100_000, 1, 256), make([]byte, 256), uv(1), set)
			for range 8 {
				b = append(b, uv(colRuns, 1, 0, 100_000)...)
			}
			return append(b, uv(valDecimal, 0, colRuns, 1, 0, 100_000)...)
		}(), Limits{}, ErrTooLarge},
	} {
		_, err := DecodeBatch(tc.frame, tc.lim)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
}

func FuzzDecodeColumns(f *testing.F) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{1, 3, 40} {
		body, _ := proto.Marshal(randomBatch(rng, n))
		f.Add(columnsFrame(f, body)[headerLen:])
	}
	f.Add([]byte{colsVersion})
	f.Fuzz(func(t *testing.T, b []byte) {
		lim := Limits{MaxEvents: 1000, MaxBodyBytes: 1 << 20}
		var c Columns
		if err := c.Decode(b, lim); err != nil {
			return
		}
		body := c.AppendProto(nil)
		if len(body) > c.protoSizeBound() {
			t.Fatalf("protobuf body of %d bytes over its bound %d", len(body), c.protoSizeBound())
		}
		var batch wirepb.Batch
		if proto.Unmarshal(body, &batch) != nil {
			return // strings that are not UTF-8
		}
		if len(batch.Events) != c.Len() {
			t.Fatalf("%d events in the protobuf body, %d in the columns", len(batch.Events), c.Len())
		}
		// What decodes re-encodes to columns that decode to the same batch.
		frame, ok := appendColumns([]byte{frameMagic, SchemaVersion, byte(CodecColumns), byte(MsgBatch)}, body)
		if !ok {
			t.Fatal("a batch read from columns has no columnar form")
		}
		again, err := DecodeBatch(frame, lim)
		if err != nil {
			t.Fatal(err)
		}
		sameBatch(t, &batch, again)
	})
}

// TestReadIntColumnMatchesUvarint checks the plain column reader's word
// paths (eight one-byte numbers at once, two- and three-byte numbers
// unrolled) against binary.Uvarint one number at a time: the same numbers,
// the same bytes left, and an error exactly where the simple reading
// fails (a truncated column, a bad varint, an index at or past the limit),
// over columns that mix number lengths at every offset, non-minimal
// encodings and limits around 0x80.
func TestReadIntColumnMatchesUvarint(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	number := func() []byte { // of any length, sometimes non-minimal
		switch rng.IntN(8) {
		case 0, 1, 2, 3:
			return binary.AppendUvarint(nil, rng.Uint64N(0x80))
		case 4:
			return binary.AppendUvarint(nil, rng.Uint64N(1<<14))
		case 5:
			return binary.AppendUvarint(nil, rng.Uint64N(1<<21))
		case 6:
			return binary.AppendUvarint(nil, rng.Uint64()>>rng.UintN(64))
		}
		b := binary.AppendUvarint(nil, rng.Uint64N(1<<14)) // non-minimal: a zero continuation byte added
		b[len(b)-1] |= 0x80
		return append(b, 0)
	}
	reference := func(b []byte, n, limit int) ([]uint64, []byte, bool) {
		var out []uint64
		for range n {
			v, k := binary.Uvarint(b)
			if k <= 0 || limit >= 0 && v >= uint64(limit) {
				return nil, nil, false
			}
			out, b = append(out, v), b[k:]
		}
		return out, b, true
	}
	limits := []int{-1, 0, 1, 5, 0x7f, 0x80, 0x81, 300}
	for round := range 4000 {
		n := rng.IntN(40)
		limit := limits[rng.IntN(len(limits))]
		// Indexes: below the limit, but for one that may be at it.
		indexes, planted := limit > 0 && rng.IntN(2) == 0, -1
		if indexes && rng.IntN(2) == 0 {
			planted = rng.IntN(n + 1)
		}
		var col []byte
		for i := range n {
			var b []byte
			switch {
			case i == planted:
				b = binary.AppendUvarint(nil, uint64(limit))
			case indexes:
				b = binary.AppendUvarint(nil, rng.Uint64N(uint64(limit)))
			default:
				b = number()
			}
			col = append(col, b...)
		}
		switch rng.IntN(4) {
		case 0: // cut short
			col = col[:rng.IntN(len(col)+1)]
		case 1: // a varint that never ends
			col = append(col, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
		}
		tail := []byte{0x42, 0x81}[:rng.IntN(3)]
		in := append(append([]byte{colPlain}, col...), tail...)
		want, rest, ok := reference(in[1:], n, limit)

		r := &colReader{b: in}
		if limit < 0 {
			got := r.intColumn(nil, n, limit, "test column")
			if ok != (r.err == nil) || ok && (!slices.Equal(got, want) || !bytes.Equal(r.b, rest)) {
				t.Fatalf("round %d, %d numbers, no limit, % x: got %v %v rest % x, want %v ok %v rest % x", round, n, in, got, r.err, r.b, want, ok, rest)
			}
			continue
		}
		got := readIntColumn(r, []uint32(nil), n, limit, "test column")
		if ok != (r.err == nil) {
			t.Fatalf("round %d, %d numbers, limit %d, % x: error %v, want ok %v", round, n, limit, in, r.err, ok)
		}
		if ok {
			for i := range want {
				if uint64(got[i]) != want[i] {
					t.Fatalf("round %d, limit %d, % x: number %d is %d, want %d", round, limit, in, i, got[i], want[i])
				}
			}
			if len(got) != len(want) || !bytes.Equal(r.b, rest) {
				t.Fatalf("round %d, limit %d: %d numbers, rest % x; want %d, % x", round, limit, len(got), r.b, len(want), rest)
			}
		}
	}
}

// TestFill checks fill at lengths around its doublings.
func TestFill(t *testing.T) {
	for n := range 70 {
		s := make([]int32, n+1)
		s[n] = -1
		fill(s[:n], 7)
		for i, v := range s[:n] {
			if v != 7 {
				t.Fatalf("length %d: element %d is %d", n, i, v)
			}
		}
		if s[n] != -1 {
			t.Fatalf("length %d: wrote past the end", n)
		}
	}
}
