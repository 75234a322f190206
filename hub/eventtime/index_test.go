package eventtime

import (
	"slices"
	"testing"
	"time"
)

// TestBucketChoice: an entry is indexed at the smallest level whose
// buckets holding its events number at most four, else at the catch-all
// with its span.
func TestBucketChoice(t *testing.T) {
	day := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) int64 { return day.Add(d).UnixNano() }
	ns := func(d time.Duration) int64 { return int64(d) }
	tests := []struct {
		name    string
		times   []int64
		level   byte
		buckets []int64
	}{
		{"none", nil, 0, nil},
		{"one event", []int64{at(90 * time.Second)}, 0, []int64{at(time.Minute)}},
		{"four minutes", []int64{at(0), at(time.Minute), at(3 * time.Minute), at(2 * time.Minute), at(30 * time.Second)}, 0,
			[]int64{at(0), at(time.Minute), at(3 * time.Minute), at(2 * time.Minute)}},
		{"five minutes of one hour", []int64{at(0), at(time.Minute), at(2 * time.Minute), at(3 * time.Minute), at(4 * time.Minute)}, 1,
			[]int64{at(0)}},
		{"five minutes over an hour boundary", []int64{at(58 * time.Minute), at(59 * time.Minute), at(60 * time.Minute), at(61 * time.Minute), at(62 * time.Minute)}, 1,
			[]int64{at(0), at(time.Hour)}},
		{"five hours of one day", []int64{at(0), at(time.Hour), at(2 * time.Hour), at(3 * time.Hour), at(4 * time.Hour)}, 2,
			[]int64{at(0)}},
		{"four days", []int64{at(0), at(24 * time.Hour), at(48 * time.Hour), at(72*time.Hour + time.Hour), at(72*time.Hour + 2*time.Hour)}, 2,
			[]int64{at(0), at(24 * time.Hour), at(48 * time.Hour), at(72 * time.Hour)}},
		{"five days", []int64{at(time.Hour), at(24 * time.Hour), at(0), at(96 * time.Hour), at(72 * time.Hour), at(48 * time.Hour)}, levelAll,
			[]int64{at(0)}}, // and the span's end, at(96h)
		{"before 1970", []int64{ns(-time.Second), ns(-61 * time.Second)}, 0, []int64{ns(-time.Minute), ns(-2 * time.Minute)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s Buckets
			for _, ns := range tt.times {
				s.add(ns)
			}
			level, buckets, last := s.choose()
			if level != tt.level || !slices.Equal(buckets, tt.buckets) {
				t.Fatalf("level %d buckets %v, want %d %v", level, buckets, tt.level, tt.buckets)
			}
			if wantLast := slices.Max(append([]int64{0}, tt.times...)); level == levelAll && last != wantLast {
				t.Fatalf("catch-all span ends at %d, want %d", last, wantLast)
			}
		})
	}
}
