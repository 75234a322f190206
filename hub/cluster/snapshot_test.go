package cluster

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"testing"

	badger "github.com/dgraph-io/badger/v4"

	"edgeflow/hub/hublog"
	"edgeflow/hub/natslog"
)

// TestClusterSnapDecodeBounds: a state snapshot round-trips; every
// truncation, a length beyond what remains, a key of another generation
// or layout and trailing bytes are refused with an error, never a panic.
func TestClusterSnapDecodeBounds(t *testing.T) {
	key := func(prefix []byte, n int) []byte { return append(slices.Clone(prefix), bytes.Repeat([]byte{7}, n)...) }
	pre := hublog.PartialPrefixes(3)
	d := &Snap{Stream: "EDGEFLOW", WALPos: 99, Gen: 3, State: []byte(`{"registry":{}}`),
		Partials: []Partial{{Key: key(pre[0], 12), Value: []byte("p0")}, {Key: key(pre[1], 13), Value: []byte("tier")}}}
	enc := encodeSnap(t, d)
	got, err := Decode(enc)
	if err != nil || got.Stream != "EDGEFLOW" || got.WALPos != 99 || got.Gen != 3 || string(got.State) != string(d.State) || len(got.Partials) != 2 ||
		string(got.Partials[1].Value) != "tier" {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	for n := range len(enc) {
		if _, err := Decode(enc[:n]); err == nil {
			t.Fatalf("truncated to %d bytes: no error", n)
		}
	}
	if _, err := Decode(append(slices.Clone(enc), 0)); err == nil {
		t.Fatal("trailing byte: no error")
	}
	for _, bad := range [][]byte{key(hublog.PartialPrefixes(4)[0], 12), key(pre[0], 11), key([]byte{hublog.PrefixWAL}, 20)} {
		d2 := *d
		d2.Partials = []Partial{{Key: bad, Value: []byte("x")}}
		if _, err := Decode(encodeSnap(t, &d2)); err == nil {
			t.Fatalf("key %x: no error", bad)
		}
	}
	huge := append([]byte(SnapMagic), SnapVersion, 1, 'S', 1, 3)
	huge = binary.AppendUvarint(huge, 1<<62)
	if _, err := Decode(huge); err == nil {
		t.Fatal("state length beyond the bytes: no error")
	}
	if got := RestoreGaps(map[int]uint64{0: 10, 2: 4}, 3, 6); !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("gaps %v", got)
	}
	if got := RestoreGaps(map[int]uint64{0: 10, 2: 4, 5: 1}, 0, 6); !slices.Equal(got, []int{2, 5}) {
		t.Fatalf("gaps of the positions held %v", got)
	}
}

// encodeSnap encodes d without a Badger read or a size bound.
func encodeSnap(t *testing.T, d *Snap) []byte {
	t.Helper()
	b, err := Encode(d, nil, math.MaxInt64)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestClusterSnapEncodeReadsPartials: Encode takes from a Badger read the
// partials of the snapshot's generation only, in key order after those
// given, and refuses a snapshot beyond its byte bound.
func TestClusterSnapEncodeReadsPartials(t *testing.T) {
	db, err := badger.Open(badger.DefaultOptions(t.TempDir()).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	key := func(prefix []byte, b byte) []byte {
		return append(slices.Clone(prefix), bytes.Repeat([]byte{b}, 12)...)
	}
	pre3, pre4 := hublog.PartialPrefixes(3), hublog.PartialPrefixes(4)
	err = db.Update(func(txn *badger.Txn) error {
		for _, p := range []Partial{{key(pre3[0], 2), []byte("b")}, {key(pre3[0], 1), []byte("a")}, {key(pre4[0], 1), []byte("other generation")}} {
			if err := txn.Set(p.Key, p.Value); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	given := Partial{Key: key(pre3[0], 9), Value: []byte("given")}
	s := &Snap{Stream: "S", WALPos: 7, Gen: 3, State: []byte("state"), Partials: []Partial{given}}
	txn := db.NewTransaction(false)
	b, err := Encode(s, txn, math.MaxInt64)
	txn.Discard()
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	var vals []string
	for _, p := range got.Partials {
		vals = append(vals, string(p.Value))
	}
	if !slices.Equal(vals, []string{"given", "a", "b"}) || got.WALPos != 7 || string(got.State) != "state" {
		t.Fatalf("decoded %+v, partial values %q", got, vals)
	}
	txn = db.NewTransaction(false)
	defer txn.Discard()
	if _, err := Encode(s, txn, int64(len(b)/2)); !errors.Is(err, natslog.ErrSnapshotTooLarge) {
		t.Fatalf("%d bytes bounded by %d: %v", len(b), len(b)/2, err)
	}
}
