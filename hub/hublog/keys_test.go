package hublog

import (
	"slices"
	"testing"
)

// TestEventIndexKeyOrder: keys parse back to what made them, and sort by
// device, level, bucket (negative buckets first), position.
func TestEventIndexKeyOrder(t *testing.T) {
	in := []EventIndexKey{
		{"a", 0, -120e9, 7, 1}, {"a", 0, -60e9, 3, 2}, {"a", 0, 0, 1, 3}, {"a", 0, 60e9, 2, 4},
		{"a", 1, 0, 9, 5}, {"a", EventIndexLevelAll, 0, 4, 6}, {"ab", 0, -60e9, 1, 7},
	}
	var keys [][]byte
	for _, k := range in {
		keys = append(keys, AppendEventIndexKey(EventIndexPrefix(k.Device), k.Level, k.Bucket, k.Seq, k.ServerTimeNs))
	}
	if !slices.IsSortedFunc(keys, func(a, b []byte) int { return slices.Compare(a, b) }) {
		t.Fatal("keys do not sort in device, level, bucket order")
	}
	for i, k := range keys {
		got, err := ParseEventIndexKey(k)
		if err != nil || got != in[i] {
			t.Fatalf("parse %x: %+v %v, want %+v", k, got, err, in[i])
		}
	}
	for _, bad := range [][]byte{nil, {PrefixEventIndex}, append([]byte{'w', 'a', 0}, make([]byte, EventKeyFixLen)...),
		append([]byte{PrefixEventIndex, 'a', 0, EventIndexLevelAll + 1}, make([]byte, EventKeyFixLen-1)...)} {
		if _, err := ParseEventIndexKey(bad); err == nil {
			t.Fatalf("parsed %x", bad)
		}
	}
}
