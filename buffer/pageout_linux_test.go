//go:build linux

package buffer

import (
	"bytes"
	"context"
	"testing"
	"time"
)

// TestPageOut checks that the pager finds Badger's mappings of the store's
// files and that paging them out, continuously and while appends, reads
// and acks run, changes no data. Whether the resident set shrinks is the
// kernel's business and measured by scripts/footprint.sh, not asserted.
func TestPageOut(t *testing.T) {
	if !pageOutSupported() {
		t.Skip("kernel without MADV_PAGEOUT")
	}
	dir := t.TempDir()
	s := openTest(t, dir, Options{Profile: ProfileLowMemory, PageOutInterval: time.Millisecond, Durability: DurabilityNone})
	st, _ := s.Stream("d", StreamOptions{})
	ctx := context.Background()
	batch := benchBatch(1000)
	for i := 0; i < 200; i++ {
		if _, err := st.Append(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	p := newPager(dir, 0)
	if p == nil {
		t.Fatal("no pager for a Linux directory")
	}
	if n := p.pageOut(); n == 0 {
		t.Fatal("found no mapping of the store's files")
	}
	seq := uint64(1)
	for seq <= 200_000 {
		recs, err := st.ReadFrom(seq, 5000, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if want := batch[(r.Seq-1)%1000]; r.Seq != seq || !bytes.Equal(r.Data, want) {
				t.Fatalf("seq %d: got seq %d %q, want %q", seq, r.Seq, r.Data, want)
			}
			seq++
		}
		p.pageOut()
		if err := st.Ack(seq - 1); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPagerMapping parses /proc/self/maps lines.
func TestPagerMapping(t *testing.T) {
	p := &pager{prefix: []byte("/data/buf/")}
	for _, c := range []struct {
		line       string
		start, end uintptr
		ok         bool
	}{
		{"b6000000-b6400000 rw-s 00000000 fd:01 1234  /data/buf/000001.vlog", 0xb6000000, 0xb6400000, true},
		{"b6000000-b6001000 r--s 00000000 fd:01 99   /data/buf/000007.sst (deleted)", 0xb6000000, 0xb6001000, true},
		{"00400000-009bf000 r-xp 00000000 fd:01 7 /usr/bin/edgeagent", 0, 0, false},
		{"b6000000-b6001000 rw-p 00000000 00:00 0 ", 0, 0, false},
		{"b6000000-b6001000 rw-s 00000000 fd:01 5 /data/buffer-other/x.sst", 0, 0, false},
		{"garbage /data/buf/x", 0, 0, false},
	} {
		s, e, ok := p.mapping([]byte(c.line))
		if s != c.start || e != c.end || ok != c.ok {
			t.Errorf("%q: got %x-%x %v", c.line, s, e, ok)
		}
	}
}
