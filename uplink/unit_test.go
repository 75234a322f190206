package uplink

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"edgeflow/buffer"
	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

func TestBackoff(t *testing.T) {
	const lo, hi = 100 * time.Millisecond, 10 * time.Second
	rnd := rand.New(rand.NewPCG(1, 2))
	prevMean := time.Duration(0)
	for attempt := 0; attempt < 12; attempt++ {
		ceil := backoffCeiling(attempt, lo, hi)
		if want := min(lo<<attempt, hi); ceil != want {
			t.Fatalf("attempt %d: ceiling %v, want %v", attempt, ceil, want)
		}
		var sum time.Duration
		const n = 2000
		for range n {
			d := backoff(attempt, lo, hi, rnd)
			if d < 0 || d > ceil {
				t.Fatalf("attempt %d: delay %v outside [0, %v]", attempt, d, ceil)
			}
			sum += d
		}
		mean := sum / n
		// Full jitter: the mean is about half the ceiling, so it grows
		// until the ceiling reaches the cap.
		if mean < ceil*4/10 || mean > ceil*6/10 {
			t.Errorf("attempt %d: mean %v, want about %v", attempt, mean, ceil/2)
		}
		if ceil < hi && mean <= prevMean {
			t.Errorf("attempt %d: mean %v did not grow from %v", attempt, mean, prevMean)
		}
		prevMean = mean
	}
	if d := backoffCeiling(1000, lo, hi); d != hi {
		t.Fatalf("huge attempt: ceiling %v, want the cap %v", d, hi)
	}
}

func TestBucket(t *testing.T) {
	now := time.Unix(0, 0)
	b := newBucket(1000, 500, now) // 1000 B/s, burst max(500, 1000)
	if d := b.take(1000, now); d != 0 {
		t.Fatalf("first second's worth should pass at once, wait %v", d)
	}
	if d := b.take(100, now); d != 100*time.Millisecond {
		t.Fatalf("empty bucket: wait %v, want 100ms", d)
	}
	now = now.Add(100 * time.Millisecond)
	if d := b.take(100, now); d != 0 {
		t.Fatalf("after refill: wait %v", d)
	}
	// A frame larger than the burst goes once the bucket is full, leaving
	// a debt that the next frame waits out.
	now = now.Add(10 * time.Second)
	if d := b.take(3000, now); d != 0 {
		t.Fatalf("oversized frame on a full bucket: wait %v", d)
	}
	if d := b.take(1, now); d != 2001*time.Millisecond {
		t.Fatalf("after the debt: wait %v, want 2.001s", d)
	}
	// Over a long run the rate holds: count what passes in 60 s of 10 ms steps.
	sent := 0
	for i := 0; i < 6000; i++ {
		now = now.Add(10 * time.Millisecond)
		if b.take(100, now) == 0 {
			sent += 100
		}
	}
	if sent < 57_000 || sent > 61_000 {
		t.Fatalf("sent %d bytes in 60 s at 1000 B/s", sent)
	}
}

func TestWindowPrefix(t *testing.T) {
	var w window
	for _, r := range [][2]uint64{{1, 10}, {11, 20}, {31, 40}, {41, 50}} { // 21..30 dropped by the buffer
		w.push(&flight{first: r[0], last: r[1]})
	}
	answer := func(first, last uint64) (uint64, bool) {
		f := w.find(first, last)
		if f == nil {
			return 0, false
		}
		f.done = true
		return w.popDone()
	}
	steps := []struct {
		first, last uint64
		upTo        uint64
		ok          bool
		left        int
	}{
		{31, 40, 0, false, 4}, // out of order: nothing yet
		{11, 20, 0, false, 4},
		{1, 10, 40, true, 1}, // the prefix through 31..40 is complete
		{5, 10, 0, false, 1}, // not a batch in flight
		{41, 50, 50, true, 0},
	}
	for i, s := range steps {
		upTo, ok := answer(s.first, s.last)
		if upTo != s.upTo || ok != s.ok || w.len() != s.left {
			t.Fatalf("step %d (%d..%d): got %d %v left %d, want %d %v left %d", i, s.first, s.last, upTo, ok, w.len(), s.upTo, s.ok, s.left)
		}
	}
}

// TestWindowRun: an ack for a run of batches matches only the batches that
// cover its range exactly, one after the other.
func TestWindowRun(t *testing.T) {
	var w window
	for _, r := range [][2]uint64{{1, 10}, {11, 20}, {31, 40}, {41, 50}, {51, math.MaxUint64}} { // 21..30 dropped by the buffer
		w.push(&flight{first: r[0], last: r[1]})
	}
	for _, c := range []struct {
		first, last uint64
		want        []uint64 // the firsts of the batches matched
	}{
		{1, 10, []uint64{1}},
		{1, 20, []uint64{1, 11}},
		{31, 50, []uint64{31, 41}},
		{31, math.MaxUint64, []uint64{31, 41, 51}},
		{1, 40, nil},  // 21..30 is no batch in flight
		{1, 15, nil},  // ends inside a batch
		{5, 20, nil},  // starts inside one
		{11, 45, nil}, // runs on past 40 into half of 41..50
		{21, 30, nil},
		{60, 70, nil},
		{41, 40, nil},
	} {
		var got []uint64
		for _, f := range w.run(nil, c.first, c.last) {
			got = append(got, f.first)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("run(%d, %d) = %v, want %v", c.first, c.last, got, c.want)
		}
	}
}

// TestRangeAckFreesTheRun: one OK ack for a run of batches frees each of
// them once, counting each, also when one of them was answered on its own
// before; the same ack again frees nothing.
func TestRangeAckFreesTheRun(t *testing.T) {
	_, st := openStream(t, "dev-run")
	appendEvents(t, st, 40, 40)
	u := newUplink(t, st, "tcp://127.0.0.1:1", nil) // never run: no broker needed
	for _, r := range [][2]uint64{{1, 10}, {11, 20}, {21, 30}, {31, 40}} {
		u.win.push(&flight{first: r[0], last: r[1], sends: 1, sent: time.Now()})
	}
	sid := st.ID()
	ack := func(first, last uint64) (uint64, bool) {
		p, err := wire.EncodeAck(&wirepb.Ack{StreamId: sid[:], FirstSeq: first, LastSeq: last, Status: wirepb.AckStatus_ACK_STATUS_OK})
		if err != nil {
			t.Fatal(err)
		}
		return u.handleAck(p, time.Now())
	}
	if _, ok := ack(21, 30); ok {
		t.Fatal("21..30 alone acked the buffer")
	}
	if upTo, ok := ack(1, 40); !ok || upTo != 40 || u.win.len() != 0 {
		t.Fatalf("the run 1..40: acked through %d (%v), %d batches left in flight; want 40 and none", upTo, ok, u.win.len())
	}
	if got, want := value(u.m.BatchesAcked.WithLabelValues("ok")), 4.0; got != want {
		t.Errorf("batches acked ok = %v, want %v", got, want)
	}
	if got := value(u.m.EventsAcked); got != 40 {
		t.Errorf("events acked = %v, want 40", got)
	}
	if _, ok := ack(1, 40); ok || value(u.m.AcksIgnored.WithLabelValues("unmatched")) != 1 {
		t.Fatal("the same run again was not ignored as unmatched")
	}
}

func TestOptionsValidate(t *testing.T) {
	base := func() Options {
		return Options{DeviceID: "dev-1", Brokers: []string{"tcp://127.0.0.1:1883"}}
	}
	cases := []struct {
		name  string
		tweak func(*Options)
		want  string // substring of the error; "" means valid
	}{
		{"defaults", func(*Options) {}, ""},
		{"no linger", func(o *Options) { o.Linger = NoLinger }, ""},
		{"device", func(o *Options) { o.DeviceID = "a/b" }, "device id"},
		{"no broker", func(o *Options) { o.Brokers = nil }, "brokers"},
		{"bad scheme", func(o *Options) { o.Brokers = []string{"http://x:1"} }, "brokers"},
		{"batch events", func(o *Options) { o.MaxBatchEvents = 200_000 }, "max batch events"},
		{"batch bytes", func(o *Options) { o.MaxBatchBytes = 100 }, "max batch bytes"},
		{"linger", func(o *Options) { o.Linger = time.Hour }, "linger"},
		{"linger 5ns", func(o *Options) { o.Linger = 5 }, "linger"},
		{"linger 1ms", func(o *Options) { o.Linger = time.Millisecond }, ""},
		{"window", func(o *Options) { o.Window = 5000 }, "window"},
		{"ack timeout", func(o *Options) { o.AckTimeout = time.Millisecond }, "ack timeout"},
		{"max ack timeout", func(o *Options) { o.AckTimeout = time.Minute; o.MaxAckTimeout = time.Second }, "max ack timeout"},
		{"bandwidth", func(o *Options) { o.BandwidthBytesPerSec = -1 }, "bandwidth"},
		{"backoff", func(o *Options) { o.BackoffMin = time.Minute; o.BackoffMax = time.Second }, "backoff max"},
		{"keep alive", func(o *Options) { o.KeepAlive = time.Millisecond }, "keep alive"},
		{"tls pair", func(o *Options) { o.TLS.CertFile = "c.pem" }, "cert file and key file"},
		{"ack qos 0", func(o *Options) { o.AckQoS = AckQoSAtMostOnce }, ""},
		{"ack qos 1", func(o *Options) { o.AckQoS = 1 }, ""},
		{"ack qos 2", func(o *Options) { o.AckQoS = 2 }, "ack qos"},
		{"ack qos -2", func(o *Options) { o.AckQoS = -2 }, "ack qos"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := base()
			c.tweak(&o)
			o.EnsureDefaults()
			err := o.Validate()
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("error %v, want one naming %q", err, c.want)
			}
		})
	}
}

func TestAckQoSDefault(t *testing.T) {
	o := Options{DeviceID: "dev-1", Brokers: []string{"tcp://127.0.0.1:1883"}}
	o.EnsureDefaults()
	if o.AckQoS != 1 || o.ackQoS() != 1 {
		t.Fatalf("default ack qos %d (subscribes at %d), want 1", o.AckQoS, o.ackQoS())
	}
	o.AckQoS = AckQoSAtMostOnce
	o.EnsureDefaults()
	if o.ackQoS() != 0 {
		t.Fatalf("AckQoSAtMostOnce subscribes at %d, want 0", o.ackQoS())
	}
}

func TestTLSFilesCheckedAtNew(t *testing.T) {
	_, st := openStream(t, "dev-tls")
	_, err := New(st, Options{DeviceID: "dev-tls", Brokers: []string{"ssl://127.0.0.1:8883"},
		TLS: TLSOptions{CAFile: "testdata/missing-ca.pem"}, Logger: quietLogger()})
	if err == nil || !strings.Contains(err.Error(), "tls ca file") {
		t.Fatalf("New with a missing CA file: %v", err)
	}
}

func TestReasonLabelBounded(t *testing.T) {
	m, _ := NewMetrics(nil)
	if got := m.reasonLabel("Bad_Time: event 3"); got != "bad_time" {
		t.Fatalf("label %q", got)
	}
	for i := range 100 {
		m.reasonLabel(strings.Repeat("x", i%50+1))
	}
	if got := m.reasonLabel("brand_new"); got != "other" {
		t.Fatalf("label after %d reasons: %q, want other", maxReasonLabels, got)
	}
}

// hidingStream hides its records from Scan while hide is set, as a buffer
// that syncs on an interval does between an append and the next sync.
type hidingStream struct {
	*buffer.Stream
	hide bool
}

func (h *hidingStream) Scan(seq uint64, maxEvents, maxBytes int, fn func(uint64, []byte) bool) (int, error) {
	if h.hide {
		return 0, nil
	}
	return h.Stream.Scan(seq, maxEvents, maxBytes, fn)
}

func (h *hidingStream) ScanBlocks(seq uint64, maxEvents, maxBytes int, fn func(uint64, []byte, buffer.Range, bool) bool) (int, error) {
	if h.hide {
		return 0, nil
	}
	return h.Stream.ScanBlocks(seq, maxEvents, maxBytes, fn)
}

// TestLingerNotRestartedByUnreadable: events that waited their linger but
// were not readable yet go as soon as they are, without a second linger,
// and the send loop does not spin while it waits for them.
func TestLingerNotRestartedByUnreadable(t *testing.T) {
	_, st := openStream(t, "dev-linger")
	h := &hidingStream{Stream: st, hide: true}
	u, err := New(h, Options{DeviceID: "dev-linger", Brokers: []string{"tcp://127.0.0.1:1"}, Linger: 100 * time.Millisecond,
		PollInterval: time.Second, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	u.next = 1
	appendEvents(t, st, 1, 1)
	t0 := time.Now()
	if fs, err := u.readBatches(t0, 1); len(fs) != 0 || err != nil {
		t.Fatalf("read before the linger: %d batches, %v", len(fs), err)
	}
	if fs, err := u.readBatches(t0.Add(100*time.Millisecond), 1); len(fs) != 0 || err != nil {
		t.Fatalf("read a record not yet readable: %d batches, %v", len(fs), err)
	}
	now := t0.Add(101 * time.Millisecond)
	if w := u.nextWake(now); !w.After(now) {
		t.Fatalf("waiting for readable records, the loop would wake at once (%v)", w.Sub(now))
	}
	h.hide = false
	if fs, err := u.readBatches(t0.Add(110*time.Millisecond), 1); len(fs) != 1 || err != nil {
		t.Fatalf("lingered events once readable: %d batches, %v, want 1 at once", len(fs), err)
	}
	// The next event lingers again from when it is first seen.
	appendEvents(t, st, 1, 1)
	if fs, _ := u.readBatches(t0.Add(120*time.Millisecond), 1); len(fs) != 0 {
		t.Fatal("a new event went without its linger")
	}
	if fs, _ := u.readBatches(t0.Add(220*time.Millisecond), 1); len(fs) != 1 {
		t.Fatal("a new event did not go after its linger")
	}
}

// TestWakeWithReadableStream: the send loop of a stream that signals
// readability neither polls at PollInterval nor arms its linger while the
// lingering records are not readable yet (the buffer's interval sync); once
// they are, the linger deadline counts again from the first sight.
func TestWakeWithReadableStream(t *testing.T) {
	s, err := buffer.Open(t.TempDir(), buffer.Options{Logger: quietLogger(), Durability: buffer.DurabilityInterval, SyncInterval: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	st, err := s.Stream("dev-wake", buffer.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	u, err := New(st, Options{DeviceID: "dev-wake", Brokers: []string{"tcp://127.0.0.1:1"}, Linger: 50 * time.Millisecond,
		PollInterval: 10 * time.Millisecond, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	u.next = 1
	if w := u.nextWake(time.Now()); time.Until(w) < readablePollFloor-time.Second {
		t.Fatalf("idle, the loop wakes in %v: polling at PollInterval", time.Until(w))
	}
	appendEvents(t, st, 1, 1)
	t0 := time.Now()
	if fs, err := u.readBatches(t0, 1); len(fs) != 0 || err != nil { // the linger starts
		t.Fatalf("read before the linger: %d batches, %v", len(fs), err)
	}
	if st.Stats().Readable > 1 {
		t.Skip("the buffer synced before the check (a slow machine): nothing to test")
	}
	if w := u.nextWake(t0); w.Sub(t0) < readablePollFloor-time.Second {
		t.Fatalf("lingering records not yet readable: the loop wakes after %v, want the poll floor", w.Sub(t0))
	}
	select {
	case <-st.Readable():
	case <-time.After(10 * time.Second):
		t.Fatal("never readable")
	}
	if w := u.nextWake(t0); !w.Equal(t0.Add(50 * time.Millisecond)) {
		t.Fatalf("readable lingering records: the loop wakes after %v, want the linger's 50ms", w.Sub(t0))
	}
	if fs, err := u.readBatches(t0.Add(50*time.Millisecond), 1); len(fs) != 1 || err != nil {
		t.Fatalf("after the linger: %d batches, %v", len(fs), err)
	}
}
