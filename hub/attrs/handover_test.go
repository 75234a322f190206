package attrs

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func put(t *Table, dev, site string, from, written int64) {
	t.Put(dev, Version{From: from, Attrs: map[string]string{"site": site}, Written: written})
}

func dump(t *Table, devs ...string) string {
	var b strings.Builder
	for _, d := range devs {
		fmt.Fprintf(&b, "%s:%v;", d, t.AttrVersions(d))
	}
	return b.String()
}

// TestTableHandover: the versions of the devices of one "partition"
// (prefix a-) move from one table to another: the export carries them
// with their written times, ReplaceDevices makes the importer's versions
// of those devices exactly the exporter's (idempotent), leaves its other
// devices alone, refuses a corrupt export or one naming a device outside
// the partition without changing anything, and the imported devices are
// held (Compact leaves them) through a snapshot and restore. DropDevices
// removes them.
func TestTableHandover(t *testing.T) {
	keep := func(d string) bool { return strings.HasPrefix(d, "a-") }
	src := New(Limits{})
	put(src, "a-1", "north", 0, 10)
	put(src, "a-1", "south", 600, 11)
	put(src, "a-2", "east", 60, 12)
	put(src, "b-1", "west", 0, 13)
	exp := src.ExportDevices(keep)

	dst := New(Limits{})
	put(dst, "a-1", "stale", 0, 1) // an older state of the partition
	put(dst, "a-3", "gone", 0, 2)  // a device the exporter has no versions of
	put(dst, "b-2", "mine", 0, 3)  // another partition's
	removed, imported, err := dst.ReplaceDevices(keep, exp)
	if err != nil || removed != 2 || imported != 2 {
		t.Fatalf("ReplaceDevices: removed %d, imported %d, %v", removed, imported, err)
	}
	devs := []string{"a-1", "a-2", "a-3"}
	if got, want := dump(dst, devs...), dump(src, devs...); got != want {
		t.Fatalf("imported versions:\n got %s\nwant %s", got, want)
	}
	if v, ok := dst.At("a-1", 700); !ok || v.Written != 11 || v.Attrs["site"] != "south" {
		t.Fatalf("a-1 at 700: %+v %v", v, ok)
	}
	if len(dst.AttrVersions("b-2")) != 1 {
		t.Fatal("another partition's device changed")
	}
	before := dump(dst, "a-1", "a-2", "b-2")
	if _, _, err := dst.ReplaceDevices(keep, exp); err != nil || dump(dst, "a-1", "a-2", "b-2") != before {
		t.Fatalf("a second import changed the table: %v", err)
	}
	for _, bad := range [][]byte{nil, {9}, exp[:len(exp)-1], append(exp[:len(exp):len(exp)], 0), src.ExportDevices(nil)} {
		if _, _, err := dst.ReplaceDevices(keep, bad); err == nil || dst.CheckExport(keep, bad) == nil {
			t.Fatalf("export %x accepted", bad)
		}
		if dump(dst, "a-1", "a-2", "b-2") != before {
			t.Fatal("a refused import changed the table")
		}
	}
	if _, _, err := dst.ReplaceDevices(keep, []byte{9}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("unknown codec: %v", err)
	}

	// Held: Compact folds b-2's old versions, never a-1's.
	put(dst, "b-2", "later", 600, 4)
	put(dst, "a-1", "later", 1200, 5)
	oldest := func(string) (int64, bool) { return 2000, true }
	if n := dst.Compact(oldest); n != 1 {
		t.Fatalf("Compact removed %d versions, want 1 (b-2's)", n)
	}
	if len(dst.AttrVersions("a-1")) != 3 || dst.Held() != 2 {
		t.Fatalf("a held device was compacted: %v, %d held", dst.AttrVersions("a-1"), dst.Held())
	}
	restored := New(Limits{})
	if err := restored.Restore(dst.Snapshot()); err != nil {
		t.Fatal(err)
	}
	if restored.Held() != 2 || restored.Compact(oldest) != 0 || dump(restored, "a-1", "a-2", "b-2") != dump(dst, "a-1", "a-2", "b-2") {
		t.Fatalf("after a restore: %d held, %s", restored.Held(), dump(restored, "a-1", "a-2", "b-2"))
	}
	if n := dst.DropDevices(keep); n != 2 || dst.Held() != 0 || dst.Devices() != 1 {
		t.Fatalf("DropDevices: %d, %d held, %d left", n, dst.Held(), dst.Devices())
	}
}

// TestRestoreCodecV1: a snapshot of a build before device flags
// restores, nothing held.
func TestRestoreCodecV1(t *testing.T) {
	b := []byte{snapshotCodecV1, 1, 3, 'd', '-', '1', 1}
	b = appendVersion(b, Version{From: 5, Attrs: map[string]string{"site": "x"}, Written: 9}, true)
	tb := New(Limits{})
	if err := tb.Restore(b); err != nil {
		t.Fatal(err)
	}
	if v, ok := tb.At("d-1", 5); !ok || v.Attrs["site"] != "x" || v.Written != 9 || tb.Held() != 0 {
		t.Fatalf("restored %+v %v, %d held", v, ok, tb.Held())
	}
	for i := range len(b) {
		if err := New(Limits{}).Restore(b[:i]); err == nil {
			t.Fatalf("truncated at %d: restored", i)
		}
	}
}
