package uplink

import (
	"math"
	"sync"
	"testing"
	"time"

	"edgeflow/buffer"
	"edgeflow/internal/testbroker"
	"edgeflow/wire"
	"edgeflow/wire/wirepb"

	mqtt "github.com/eclipse/paho.mqtt.golang"
)

// TestStatusReportsBufferFill: with a real Badger buffer bounded at 64 KiB
// and no hub answering, the uplink's statuses report the stream's bound,
// the bytes it holds (its Stats) and a fill rate that, over the interval
// it names, accounts for those bytes (they were all appended since open).
func TestStatusReportsBufferFill(t *testing.T) {
	url, _ := testbroker.Embedded(t)
	s, err := buffer.Open(t.TempDir(), buffer.Options{Logger: quietLogger(), Durability: buffer.DurabilityNone})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	const capBytes = 64 << 10
	st, err := s.Stream("dev-fill", buffer.StreamOptions{MaxBytes: capBytes})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // a rate interval the clock can measure
	appendEvents(t, st, 400, 50)
	held := st.Stats().Bytes
	if held <= 0 || held >= capBytes || st.Stats().Dropped != 0 {
		t.Fatalf("test setup: stream holds %d of %d bytes, dropped %d", held, capBytes, st.Stats().Dropped)
	}

	var mu sync.Mutex
	var got []*wirepb.Status
	w := dialTest(t, url, "fill-watcher", nil)
	if tok := w.Subscribe(wire.StatusTopic("dev-fill"), 1, func(_ mqtt.Client, m mqtt.Message) {
		if s, err := wire.DecodeStatus(m.Payload(), wire.Limits{}); err == nil && s.Online {
			mu.Lock()
			got = append(got, s)
			mu.Unlock()
		}
	}); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatal("subscribe status")
	}
	u := newUplink(t, st, url, func(o *Options) { o.StatusInterval = 100 * time.Millisecond })
	runUplink(t, u)
	waitFor(t, 10*time.Second, "two online statuses", func() bool { mu.Lock(); defer mu.Unlock(); return len(got) >= 2 })
	mu.Lock()
	defer mu.Unlock()
	for _, s := range got {
		b := s.GetBuffer()
		if b == nil {
			t.Fatalf("status without buffer fill: %v", s)
		}
		if b.CapacityBytes != capBytes || b.UsedBytes != uint64(held) {
			t.Fatalf("buffer fill %v, want %d of %d bytes", b, held, capBytes)
		}
		if b.RateIntervalNs <= 0 || b.FillRate <= 0 {
			t.Fatalf("buffer fill %v: want a positive rate over an interval", b)
		}
		// The rate runs from the open (0 bytes) to now, so over its
		// interval it adds up to what the stream holds.
		if added := b.FillRate * time.Duration(b.RateIntervalNs).Seconds(); math.Abs(added-float64(held)) > 1e-6*float64(held) {
			t.Fatalf("rate %v B/s over %v adds %v bytes, the stream holds %d", b.FillRate, time.Duration(b.RateIntervalNs), added, held)
		}
		t.Logf("status: %d of %d bytes, %.0f B/s over %v", b.UsedBytes, b.CapacityBytes, b.FillRate, time.Duration(b.RateIntervalNs))
	}
}
