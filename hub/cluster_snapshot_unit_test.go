package hub

import (
	"bytes"
	"encoding/binary"
	"slices"
	"testing"

	"edgeflow/hub/hublog"
)

// TestClusterSnapDecodeBounds: a state snapshot round-trips; every
// truncation, a length beyond what remains, a key of another generation
// or layout and trailing bytes are refused with an error, never a panic.
func TestClusterSnapDecodeBounds(t *testing.T) {
	key := func(prefix []byte, n int) []byte { return append(slices.Clone(prefix), bytes.Repeat([]byte{7}, n)...) }
	pre := hublog.PartialPrefixes(3)
	d := &decodedSnap{stream: "EDGEFLOW", walPos: 99, gen: 3, state: []byte(`{"registry":{}}`),
		partials: []kv{{k: key(pre[0], 12), v: []byte("p0")}, {k: key(pre[1], 13), v: []byte("tier")}}}
	enc := encodeDecoded(d)
	got, err := decodeClusterSnap(enc)
	if err != nil || got.stream != "EDGEFLOW" || got.walPos != 99 || got.gen != 3 || string(got.state) != string(d.state) || len(got.partials) != 2 ||
		string(got.partials[1].v) != "tier" {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	for n := range len(enc) {
		if _, err := decodeClusterSnap(enc[:n]); err == nil {
			t.Fatalf("truncated to %d bytes: no error", n)
		}
	}
	if _, err := decodeClusterSnap(append(slices.Clone(enc), 0)); err == nil {
		t.Fatal("trailing byte: no error")
	}
	for _, bad := range [][]byte{key(hublog.PartialPrefixes(4)[0], 12), key(pre[0], 11), key([]byte{hublog.PrefixWAL}, 20)} {
		d2 := *d
		d2.partials = []kv{{k: bad, v: []byte("x")}}
		if _, err := decodeClusterSnap(encodeDecoded(&d2)); err == nil {
			t.Fatalf("key %x: no error", bad)
		}
	}
	huge := append([]byte(clusterSnapMagic), clusterSnapVersion, 1, 'S', 1, 3)
	huge = binary.AppendUvarint(huge, 1<<62)
	if _, err := decodeClusterSnap(huge); err == nil {
		t.Fatal("state length beyond the bytes: no error")
	}
	if got := restoreGaps(map[int]uint64{0: 10, 2: 4}, 3, 6); !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("gaps %v", got)
	}
	if got := restoreGaps(map[int]uint64{0: 10, 2: 4, 5: 1}, 0, 6); !slices.Equal(got, []int{2, 5}) {
		t.Fatalf("gaps of the positions held %v", got)
	}
}

// encodeDecoded encodes d as snapCapture.encode does.
func encodeDecoded(d *decodedSnap) []byte {
	b := append([]byte(clusterSnapMagic), clusterSnapVersion)
	b = binary.AppendUvarint(b, uint64(len(d.stream)))
	b = append(b, d.stream...)
	b = binary.AppendUvarint(b, d.walPos)
	b = binary.AppendUvarint(b, d.gen)
	b = binary.AppendUvarint(b, uint64(len(d.state)))
	b = append(b, d.state...)
	b = binary.AppendUvarint(b, uint64(len(d.partials)))
	for _, p := range d.partials {
		b = binary.AppendUvarint(b, uint64(len(p.k)))
		b = append(b, p.k...)
		b = binary.AppendUvarint(b, uint64(len(p.v)))
		b = append(b, p.v...)
	}
	return b
}
