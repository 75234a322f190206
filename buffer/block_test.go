package buffer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"testing"

	"google.golang.org/protobuf/proto"

	"edgeflow/wire/wirepb"
)

// TestBlockFormats round-trips blocks through both versions and checks that
// a compressed block is only written when it pays.
func TestBlockFormats(t *testing.T) {
	compressible := benchBatch(200)
	random := make([][]byte, 50)
	for i := range random {
		random[i] = []byte(fmt.Sprintf("%x", uint64(i)*0x9e3779b97f4a7c15))
	}
	for _, c := range []struct {
		name string
		recs [][]byte
		mode BlockCompression
		want byte
	}{
		{"plain", compressible, CompressNone, blockPlain},
		{"s2", compressible, CompressS2, blockS2},
		{"s2-not-worth-it", random, CompressS2, blockPlain},
		{"columns", eventBatch(300), CompressColumns, blockColumns},
		{"columns-fewer-bytes-than-events", sameEvents(300), CompressColumns, blockColumns},
		{"columns-not-events", compressible, CompressColumns, blockS2},
		{"columns-nor-s2", random, CompressColumns, blockPlain},
	} {
		t.Run(c.name, func(t *testing.T) {
			var scratch []byte
			v, plain := encodeBlock(100, c.recs, 0, c.mode, &scratch)
			if v[0] != c.want {
				t.Fatalf("version %d, want %d", v[0], c.want)
			}
			if p, _ := encodeBlock(100, c.recs, 0, CompressNone, nil); plain != len(p) {
				t.Fatalf("plain length %d, want %d", plain, len(p))
			}
			if len(scratch) > 0 && &scratch[0] == &v[0] {
				t.Fatal("block shares memory with the scratch buffer")
			}
			// Without own, decoded into nothing, a too small scratch buffer
			// (grown) and the grown one again; with own, never into it.
			small := make([]byte, 1)
			for _, r := range []struct {
				own     bool
				scratch *[]byte
			}{{false, nil}, {false, &small}, {false, &small}, {true, &small}} {
				own := r.own
				br, err := openBlock(v, 100+uint64(len(c.recs))-1, own, r.scratch)
				if err != nil {
					t.Fatal(err)
				}
				if own {
					clear(*r.scratch) // owned records do not live in it
				}
				for i := 0; ; i++ {
					seq, rec, ok, err := br.next()
					if err != nil {
						t.Fatal(err)
					}
					if !ok {
						if i != len(c.recs) {
							t.Fatalf("%d records, want %d", i, len(c.recs))
						}
						break
					}
					if seq != 100+uint64(i) || !bytes.Equal(rec, c.recs[i]) {
						t.Fatalf("record %d: seq %d %q", i, seq, rec)
					}
				}
			}
		})
	}
}

// TestBlockDamage checks that damaged or unknown blocks are ErrCorrupt,
// never a panic or a huge allocation.
func TestBlockDamage(t *testing.T) {
	v, _ := encodeBlock(1, benchBatch(100), 0, CompressS2, new([]byte))
	cols, _ := encodeBlock(1, eventBatch(100), 0, CompressColumns, new([]byte))
	badChunk := append(append([]byte(nil), cols[:len(cols)-5]...), 0, 0, 0, 0) // the chunk's last byte cut
	fixSum(badChunk)
	miscount := append([]byte{blockColumns, 2, 99}, cols[3:]...) // the key's last seq, but the chunk holds 100
	fixSum(miscount)
	future := append([]byte(nil), v...)
	future[0] = 9
	fixSum(future)
	bomb := append([]byte{blockS2}, 0xff, 0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0)
	fixSum(bomb)
	for name, b := range map[string][]byte{
		"short":           v[:5],
		"checksum":        append(append([]byte(nil), v[:len(v)-1]...), v[len(v)-1]^1),
		"version":         future,
		"huge-claim":      bomb,
		"column-checksum": append(append([]byte(nil), cols[:len(cols)-1]...), cols[len(cols)-1]^1),
		"column-chunk":    badChunk,
		"column-count":    miscount,
	} {
		if _, err := openBlock(b, 100, false, nil); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: want ErrCorrupt, got %v", name, err)
		}
	}
}

// fixSum rewrites a block's trailing checksum after a test edited it.
func fixSum(b []byte) {
	body := b[:len(b)-4]
	sum := crc32.Checksum(body, castagnoli)
	b[len(b)-4], b[len(b)-3], b[len(b)-2], b[len(b)-1] = byte(sum), byte(sum>>8), byte(sum>>16), byte(sum>>24)
}

// TestMixedBlockVersions reads a stream whose older blocks were written
// uncompressed (by an agent before block compression) and newer ones
// compressed, across a reopen.
func TestMixedBlockVersions(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s := openTest(t, dir, Options{BlockCompression: CompressNone, Durability: DurabilityNone})
	st, _ := s.Stream("d", StreamOptions{})
	if _, err := st.Append(ctx, benchBatch(500)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = openTest(t, dir, Options{Durability: DurabilityNone})
	st, _ = s.Stream("d", StreamOptions{})
	if _, err := st.Append(ctx, benchBatch(500)); err != nil {
		t.Fatal(err)
	}
	got, err := st.ReadFrom(1, 2000, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	want := append(benchBatch(500), benchBatch(500)...)
	if len(got) != len(want) {
		t.Fatalf("read %d records, want %d", len(got), len(want))
	}
	for i, r := range got {
		if r.Seq != uint64(i+1) || !bytes.Equal(r.Data, want[i]) {
			t.Fatalf("record %d: seq %d %q", i, r.Seq, r.Data)
		}
	}
	if g := st.Gaps(); len(g) != 0 {
		t.Fatalf("gaps: %v", g)
	}
}

// FuzzOpenBlock feeds damaged blocks to the decoder: it must fail with
// ErrCorrupt or yield records, never panic or over-allocate.
func FuzzOpenBlock(f *testing.F) {
	for _, mode := range []BlockCompression{CompressNone, CompressS2} {
		v, _ := encodeBlock(1, benchBatch(20), 0, mode, new([]byte))
		f.Add(v, uint64(20))
	}
	v, _ := encodeBlock(1, eventBatch(20), 0, CompressColumns, new([]byte))
	f.Add(v, uint64(20))
	f.Fuzz(func(t *testing.T, v []byte, lastSeq uint64) {
		br, err := openBlock(v, lastSeq, false, nil)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error not ErrCorrupt: %v", err)
			}
			return
		}
		for {
			_, _, ok, err := br.next()
			if err != nil && !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error not ErrCorrupt: %v", err)
			}
			if !ok || err != nil {
				return
			}
		}
	})
}

// eventBatch returns n encoded events shaped like one sensor's readings,
// which CompressColumns stores as columns.
func eventBatch(n int) [][]byte {
	out := make([][]byte, n)
	t := int64(1_800_000_000_000_000_000)
	for i := range out {
		t += 10e6 + int64(i%7)*1000
		out[i], _ = proto.Marshal(&wirepb.Event{Metric: []string{"temp", "rh"}[i%2], Value: float64(2000+i%50) / 100,
			Tags: []*wirepb.Tag{{Key: "rm", Value: "b2"}}, DeviceTimeNs: t, MonoNs: t - 1e15, Method: wirepb.TimeMethod_TIME_METHOD_NTP})
	}
	return out
}

// sameEvents returns n encoded events 10 ms apart with the same value: a
// column chunk of them is shorter than n bytes.
func sameEvents(n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		t := int64(1_800_000_000_000_000_000) + int64(i)*10e6
		out[i], _ = proto.Marshal(&wirepb.Event{Metric: "temp", Value: 21.5, DeviceTimeNs: t, MonoNs: t - 1e15, Method: wirepb.TimeMethod_TIME_METHOD_NTP})
	}
	return out
}
