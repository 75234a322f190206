package buffer

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestScanMatchesReadFrom checks that Scan hands out exactly the records
// ReadFrom returns for the same bounds, across block boundaries, reads that
// start inside a block and byte bounds smaller than one record, and that a
// declined record ends the scan without being counted.
func TestScanMatchesReadFrom(t *testing.T) {
	s := openTest(t, t.TempDir(), Options{Durability: DurabilityNone, MaxBlockBytes: 1 << 10})
	st, err := s.Stream("scan", StreamOptions{MaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range 60 {
		batch := make([][]byte, 1+rng.IntN(30))
		for j := range batch {
			batch[j] = fmt.Appendf(nil, "%d-%d-%s", i, j, make([]byte, rng.IntN(50)))
		}
		if _, err := st.Append(context.Background(), batch); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Ack(40); err != nil {
		t.Fatal(err)
	}
	next := st.Stats().Next
	for k := range 300 {
		from := uint64(rng.IntN(int(next) + 5))
		maxEvents, maxBytes := 1+rng.IntN(120), 1+rng.IntN(3000)
		want, err := st.ReadFrom(from, maxEvents, maxBytes)
		if err != nil {
			t.Fatal(err)
		}
		var got []Record
		n, err := st.Scan(from, maxEvents, maxBytes, func(seq uint64, rec []byte) bool {
			got = append(got, Record{seq, append([]byte(nil), rec...)})
			return true
		})
		if err != nil || n != len(got) || len(got) != len(want) {
			t.Fatalf("case %d (from %d, %d events, %d bytes): scan took %d (%d seen, %v), read %d", k, from, maxEvents, maxBytes, n, len(got), err, len(want))
		}
		for i := range want {
			if got[i].Seq != want[i].Seq || string(got[i].Data) != string(want[i].Data) {
				t.Fatalf("case %d record %d: scan %d %q, read %d %q", k, i, got[i].Seq, got[i].Data, want[i].Seq, want[i].Data)
			}
		}
		if len(want) < 2 {
			continue
		}
		stop := want[len(want)/2].Seq
		n, err = st.Scan(from, maxEvents, maxBytes, func(seq uint64, _ []byte) bool { return seq < stop })
		if err != nil || n != len(want)/2 {
			t.Fatalf("case %d: scan declining at %d took %d (%v), want %d", k, stop, n, err, len(want)/2)
		}
	}
}
