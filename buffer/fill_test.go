package buffer

import (
	"context"
	"math"
	"testing"
	"time"
)

// TestFill: a real store on a fake clock; Fill reports the held bytes, the
// stream's bound and the rate of change over the last FillRateWindow (or a
// little more) as the test's own record of the held bytes says it was,
// growing, steady and draining, and again after a reopen.
func TestFill(t *testing.T) {
	dir := t.TempDir()
	clock := &fakeClock{}
	clock.ms.Store(1_800_000_000_000)
	o := Options{Now: clock.now, MaintenanceInterval: time.Hour, Durability: DurabilitySync}
	s := openTest(t, dir, o)
	const capBytes = 1 << 20
	st, err := s.Stream("d", StreamOptions{MaxBytes: capBytes})
	if err != nil {
		t.Fatal(err)
	}
	// held records the bytes the stream held from each time on.
	type point struct{ ms, bytes int64 }
	held := []point{{clock.ms.Load(), 0}}
	at := func(ms int64) int64 { // held bytes at ms
		b := int64(0)
		for _, p := range held {
			if p.ms <= ms {
				b = p.bytes
			}
		}
		return b
	}
	check := func(what string) {
		t.Helper()
		f := st.Fill()
		now := clock.ms.Load()
		if f.UsedBytes != st.Stats().Bytes || f.CapacityBytes != capBytes {
			t.Fatalf("%s: fill %+v, stats bytes %d, cap %d", what, f, st.Stats().Bytes, capBytes)
		}
		span := f.RateInterval.Milliseconds()
		if span < FillRateWindow.Milliseconds() || span > 2*FillRateWindow.Milliseconds() {
			t.Fatalf("%s: rate interval %v, want between one and two windows", what, f.RateInterval)
		}
		want := float64(f.UsedBytes-at(now-span)) * 1000 / float64(span)
		if math.Abs(f.Rate-want) > 1e-9*math.Max(1, math.Abs(want)) {
			t.Fatalf("%s: rate %v B/s over %v, want %v", what, f.Rate, f.RateInterval, want)
		}
		t.Logf("%s: used %d of %d, %.1f B/s over %v", what, f.UsedBytes, f.CapacityBytes, f.Rate, f.RateInterval)
	}
	if f := st.Fill(); f.UsedBytes != 0 || f.Rate != 0 || f.RateInterval != 0 || f.CapacityBytes != capBytes {
		t.Fatalf("new stream: %+v", f)
	}
	ctx := context.Background()
	seq := 1
	grow := func(steps int, every time.Duration, n int) {
		for range steps {
			clock.ms.Add(every.Milliseconds())
			if _, err := st.Append(ctx, recs(seq, n)); err != nil {
				t.Fatal(err)
			}
			seq += n
			held = append(held, point{clock.ms.Load(), st.Stats().Bytes})
		}
	}
	grow(30, 5*time.Second, 20) // 150 s of steady appends
	check("growing")
	if f := st.Fill(); f.Rate <= 0 {
		t.Fatalf("growing stream, rate %v", f.Rate)
	}
	grow(10, 3*time.Second, 60) // faster
	check("faster")
	clock.ms.Add(FillRateWindow.Milliseconds() + 1)
	check("idle")
	if f := st.Fill(); f.Rate != 0 {
		t.Fatalf("idle for a window, rate %v", f.Rate)
	}
	clock.ms.Add(20_000)
	if err := st.Ack(uint64(seq - 1)); err != nil {
		t.Fatal(err)
	}
	held = append(held, point{clock.ms.Load(), st.Stats().Bytes})
	clock.ms.Add(20_000)
	check("drained")
	if f := st.Fill(); f.Rate >= 0 || f.UsedBytes != 0 {
		t.Fatalf("drained stream: %+v", f)
	}

	// Reopen: the held bytes come from the blocks, the rate starts anew.
	grow(4, time.Second, 50)
	s.Close()
	s = openTest(t, dir, o)
	if st, err = s.Stream("d", StreamOptions{MaxBytes: capBytes}); err != nil {
		t.Fatal(err)
	}
	f := st.Fill()
	if f.UsedBytes != held[len(held)-1].bytes || f.UsedBytes == 0 || f.RateInterval != 0 || f.Rate != 0 {
		t.Fatalf("after reopen: %+v, want %d bytes and no rate yet", f, held[len(held)-1].bytes)
	}
	held = []point{{clock.ms.Load(), f.UsedBytes}}
	grow(20, 5*time.Second, 10)
	check("after reopen")
}
