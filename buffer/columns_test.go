package buffer

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"edgeflow/wire"
)

// chunkRecords decodes a column chunk back to its events.
func chunkRecords(t *testing.T, chunk []byte) [][]byte {
	t.Helper()
	var c wire.Columns
	if err := c.DecodeChunk(chunk, wire.Limits{}); err != nil {
		t.Fatal(err)
	}
	out := make([][]byte, c.Len())
	for i := range out {
		out[i] = c.AppendEventProto(nil, i)
	}
	return out
}

// scanColumns is ScanColumns from seq, keeping every block with its chunk's
// events.
func scanColumns(t *testing.T, st *Stream, seq uint64) (blocks []ColumnBlock, events [][]byte) {
	t.Helper()
	n, err := st.ScanColumns(seq, func(b ColumnBlock) bool {
		events = append(events, chunkRecords(t, b.Chunk)...)
		b.Chunk = nil
		blocks = append(blocks, b)
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != len(blocks) {
		t.Fatalf("ScanColumns says %d blocks, fn took %d", n, len(blocks))
	}
	return blocks, events
}

// Blocks of events stored as columns come back from ScanColumns as the
// chunks of what was appended, block by block, from the tail cache and
// from Badger alike; Scan and ReadFrom read the same records from them.
func TestScanColumns(t *testing.T) {
	for _, cache := range []int64{0, -1} {
		t.Run(fmt.Sprintf("tailcache=%d", cache), func(t *testing.T) {
			s := openTest(t, t.TempDir(), Options{Durability: DurabilityNone, BlockCompression: CompressColumns, TailCacheBytes: cache})
			st, _ := s.Stream("d", StreamOptions{})
			ctx := context.Background()
			var all [][]byte
			for _, n := range []int{100, 250, 40} {
				recs := eventBatch(n)
				if _, err := st.Append(ctx, recs); err != nil {
					t.Fatal(err)
				}
				all = append(all, recs...)
			}
			blocks, events := scanColumns(t, st, 1)
			want := []ColumnBlock{{First: 1, Last: 100}, {First: 101, Last: 350}, {First: 351, Last: 390}}
			if len(blocks) != len(want) {
				t.Fatalf("blocks %+v, want %+v", blocks, want)
			}
			for i, b := range blocks {
				if b.First != want[i].First || b.Last != want[i].Last || b.Plain <= 0 {
					t.Fatalf("block %d: %+v, want %+v", i, b, want[i])
				}
			}
			for i := range all {
				if !bytes.Equal(events[i], all[i]) {
					t.Fatalf("event %d differs from what was appended", i)
				}
			}
			got, err := st.ReadFrom(1, 1000, 1<<20)
			if err != nil || len(got) != len(all) {
				t.Fatalf("ReadFrom: %d records, %v", len(got), err)
			}
			for i, r := range got {
				if r.Seq != uint64(i+1) || !bytes.Equal(r.Data, all[i]) {
					t.Fatalf("ReadFrom record %d: seq %d differs", i, r.Seq)
				}
			}
			n := 0
			if _, err := st.Scan(1, 1000, 1<<20, func(seq uint64, rec []byte) bool {
				if seq != uint64(n+1) || !bytes.Equal(rec, all[n]) {
					t.Fatalf("Scan record %d: seq %d differs", n, seq)
				}
				n++
				return true
			}); err != nil || n != len(all) {
				t.Fatalf("Scan: %d records, %v", n, err)
			}

			// From the start of the second block; from inside it (the
			// caller reads that part with Scan); fn stopping after one.
			if b, _ := scanColumns(t, st, 101); len(b) != 2 || b[0].First != 101 {
				t.Fatalf("from 101: %+v", b)
			}
			if b, _ := scanColumns(t, st, 150); len(b) != 0 {
				t.Fatalf("from inside a block: %+v", b)
			}
			if n, err := st.ScanColumns(1, func(ColumnBlock) bool { return false }); n != 0 || err != nil {
				t.Fatalf("fn refusing the first block: %d, %v", n, err)
			}
			// Acked blocks are gone; the scan starts at the head.
			if err := st.Ack(100); err != nil {
				t.Fatal(err)
			}
			if b, _ := scanColumns(t, st, 1); len(b) != 2 || b[0].First != 101 {
				t.Fatalf("after an ack: %+v", b)
			}
		})
	}
}

// A block that is not columns (records that are not events) ends the
// scan at it; the blocks after it are columns again.
func TestScanColumnsStopsAtOtherBlocks(t *testing.T) {
	s := openTest(t, t.TempDir(), Options{Durability: DurabilityNone, BlockCompression: CompressColumns})
	st, _ := s.Stream("d", StreamOptions{})
	ctx := context.Background()
	for _, recs := range [][][]byte{eventBatch(10), benchBatch(10), eventBatch(10)} {
		if _, err := st.Append(ctx, recs); err != nil {
			t.Fatal(err)
		}
	}
	if b, _ := scanColumns(t, st, 1); len(b) != 1 || b[0].Last != 10 {
		t.Fatalf("from 1: %+v", b)
	}
	if b, _ := scanColumns(t, st, 11); len(b) != 0 {
		t.Fatalf("from the s2 block: %+v", b)
	}
	if b, _ := scanColumns(t, st, 21); len(b) != 1 || b[0].First != 21 {
		t.Fatalf("from 21: %+v", b)
	}
}

// A corrupt column block ends the scan and becomes a gap, as Scan would
// make it.
func TestScanColumnsCorrupt(t *testing.T) {
	s := openTest(t, t.TempDir(), Options{Durability: DurabilityNone, BlockCompression: CompressColumns, TailCacheBytes: -1})
	st, _ := s.Stream("d", StreamOptions{})
	ctx := context.Background()
	for range 3 {
		if _, err := st.Append(ctx, eventBatch(10)); err != nil {
			t.Fatal(err)
		}
	}
	wb := s.db.NewWriteBatch()
	v, _ := encodeBlock(11, eventBatch(10), 0, CompressColumns, nil)
	v[len(v)-1] ^= 0xff
	s.deleteBlocks(wb, st, 11, new(int64), func(b blockInfo) bool { return b.lastSeq == 20 })
	wb.Set(blockKey(st.num, 20, 0, len(v)), v)
	if err := wb.Flush(); err != nil {
		t.Fatal(err)
	}
	if b, _ := scanColumns(t, st, 1); len(b) != 1 || b[0].Last != 10 {
		t.Fatalf("blocks before the corrupt one: %+v", b)
	}
	if g := st.Gaps(); len(g) != 1 || g[0] != (Gap{11, 20, ReasonCorrupt}) {
		t.Fatalf("gaps: %v", g)
	}
	// The gap is a range dropped in between: the scan stops at it.
	if b, _ := scanColumns(t, st, 11); len(b) != 0 {
		t.Fatalf("from the dropped range: %+v", b)
	}
	if b, _ := scanColumns(t, st, 21); len(b) != 1 || b[0].First != 21 {
		t.Fatalf("from 21: %+v", b)
	}
}
