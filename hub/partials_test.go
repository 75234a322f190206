package hub

import (
	"fmt"
	"testing"
)

// TestBadgerPartials checks Put (buffered), flush, Get and Scan order,
// negative buckets, generations and that buffered data wins.
func TestBadgerPartials(t *testing.T) {
	st, err := openStore(t.TempDir(), false, quietLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	p := newBadgerPartials()
	p.bind(st.db)
	for _, bk := range []int64{-5, 3, 1, 7} {
		if err := p.Put(2, bk, []byte(fmt.Sprint("v", bk))); err != nil {
			t.Fatal(err)
		}
	}
	_ = p.Put(1, 3, []byte("other series"))
	scan := func(from, to int64) string {
		out := ""
		if err := p.Scan(2, from, to, func(bk int64, d []byte) bool { out += fmt.Sprintf("%d=%s ", bk, d); return true }); err != nil {
			t.Fatal(err)
		}
		return out
	}
	if got := scan(-10, 7); got != "-5=v-5 1=v1 3=v3 " {
		t.Fatalf("buffered scan: %q", got)
	}
	if err := p.flush(); err != nil {
		t.Fatal(err)
	}
	_ = p.Put(2, 3, []byte("new3"))
	_ = p.Put(2, 2, []byte("v2"))
	if got := scan(-10, 100); got != "-5=v-5 1=v1 2=v2 3=new3 7=v7 " {
		t.Fatalf("mixed scan: %q", got)
	}
	if d, ok, err := p.Get(2, 7); err != nil || !ok || string(d) != "v7" {
		t.Fatalf("get: %q %v %v", d, ok, err)
	}
	if _, ok, _ := p.Get(2, 8); ok {
		t.Fatal("get of a missing partial")
	}
	p.setGeneration(1)
	if _, ok, _ := p.Get(2, 7); ok {
		t.Fatal("generation 1 sees generation 0")
	}
	n, err := dropGenerations(st.db, func(g uint64) bool { return g == 0 })
	if err != nil || n != 5 {
		t.Fatalf("dropped %d, %v", n, err)
	}
}
