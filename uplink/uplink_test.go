package uplink

import (
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"edgeflow/internal/testbroker"
	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// TestDeliversEverything appends events before and while the uplink runs,
// against a responder that reorders, duplicates and delays its answers, and
// checks that every event arrives intact and the buffer ends acked through
// the last one.
func TestDeliversEverything(t *testing.T) {
	for i, codec := range []string{"columns", "s2", "zstd", "none"} {
		// Each codec the responder must read, the brokers in turn.
		b := brokers[i%len(brokers)]
		t.Run(b.name+"/"+codec, func(t *testing.T) {
			url := b.start(t)
			_, st := openStream(t, "dev-all")
			r := newResponder(t, url, func(b *wirepb.Batch, arrival int) verdict {
				switch b.FirstSeq / 500 % 5 {
				case 1:
					return verdict{dups: 2}
				case 3:
					return verdict{delay: 30 * time.Millisecond}
				}
				return verdict{}
			})
			r.reorder = true
			appendEvents(t, st, 2500, 1000)
			var onAck []uint64 // OnAck runs on the send loop, and only there
			var onAckMu sync.Mutex
			u := newUplink(t, st, url, func(o *Options) {
				o.Compression = codec
				o.OnAck = func(upTo uint64, hubTimeNs int64) {
					if hubTimeNs <= 0 {
						t.Errorf("OnAck hub time %d: want the ack's server time", hubTimeNs)
					}
					onAckMu.Lock()
					onAck = append(onAck, upTo)
					onAckMu.Unlock()
				}
			})
			runUplink(t, u)
			for range 10 {
				appendEvents(t, st, 750, 250)
				u.Notify()
				time.Sleep(5 * time.Millisecond)
			}
			const n = 2500 + 7500
			waitFor(t, 30*time.Second, "buffer acked through the last event", func() bool { return st.Stats().Acked == n })
			r.check(t, n)
			s := u.Status()
			if s.State != StateConnected || s.AckedThrough != n || s.InFlightBatches != 0 || s.NextSeq != n+1 {
				t.Fatalf("status: %+v", s)
			}
			if got := value(u.m.EventsAcked); got != n {
				t.Fatalf("events acked metric %v, want %d", got, n)
			}
			// OnAck saw the cumulative position rise to the end, strictly.
			onAckMu.Lock()
			defer onAckMu.Unlock()
			if len(onAck) == 0 || onAck[len(onAck)-1] != n {
				t.Fatalf("OnAck positions end at %v, want %d", onAck[max(len(onAck)-3, 0):], n)
			}
			for i := 1; i < len(onAck); i++ {
				if onAck[i] <= onAck[i-1] {
					t.Fatalf("OnAck position %d after %d", onAck[i], onAck[i-1])
				}
			}
			t.Logf("batches %v, resent %v, ignored acks %v", value(u.m.BatchesPublished), value(u.m.BatchesResent), value(u.m.AcksIgnored))
		})
	}
}

// TestLostAcksAreResent drops the first answer of every third batch: those
// batches must be published again and then acked.
func TestLostAcksAreResent(t *testing.T) {
	for _, b := range brokers {
		t.Run(b.name, func(t *testing.T) {
			url := b.start(t)
			_, st := openStream(t, "dev-lost")
			var dropped atomic.Int64
			r := newResponder(t, url, func(b *wirepb.Batch, arrival int) verdict {
				if arrival == 1 && (b.FirstSeq-1)/200%3 == 0 {
					dropped.Add(1)
					return verdict{drop: true}
				}
				return verdict{}
			})
			appendEvents(t, st, 3000, 1000)
			u := newUplink(t, st, url, func(o *Options) { o.MaxBatchEvents = 200; o.AckTimeout = 300 * time.Millisecond })
			runUplink(t, u)
			waitFor(t, 30*time.Second, "all acked", func() bool { return st.Stats().Acked == 3000 })
			r.check(t, 3000)
			if resent := value(u.m.BatchesResent); resent < float64(dropped.Load()) {
				t.Fatalf("resent %v batches, but %d answers were dropped", resent, dropped.Load())
			}
			if dropped.Load() != 5 {
				t.Fatalf("dropped %d answers, want 5", dropped.Load())
			}
		})
	}
}

// TestAcksOnlyTheAnsweredPrefix withholds the answer to one batch while
// later batches are answered: the buffer must stay acked exactly through
// the batch before it, the withheld batch is resent, and everything is
// acked once the answer comes.
func TestAcksOnlyTheAnsweredPrefix(t *testing.T) {
	url := startMochi(t)
	_, st := openStream(t, "dev-prefix")
	var release atomic.Bool
	var withheld atomic.Int64
	newResponder(t, url, func(b *wirepb.Batch, arrival int) verdict {
		if b.FirstSeq == 1001 && !release.Load() {
			withheld.Add(1)
			return verdict{drop: true}
		}
		return verdict{}
	})
	appendEvents(t, st, 3000, 1000)
	u := newUplink(t, st, url, func(o *Options) { o.Window = 8; o.AckTimeout = 200 * time.Millisecond })
	runUplink(t, u)
	waitFor(t, 20*time.Second, "later batches answered", func() bool { return value(u.m.BatchesAcked) == 5 })
	waitFor(t, 20*time.Second, "the withheld batch resent", func() bool { return withheld.Load() >= 3 })
	if got := st.Stats().Acked; got != 1000 {
		t.Fatalf("buffer acked through %d while 1001..1500 is unanswered, want 1000", got)
	}
	if s := u.Status(); s.AckedThrough != 1000 || s.InFlightBatches != 4 {
		t.Fatalf("status %+v, want acked through 1000 and 4 batches in flight (1001..3000)", s)
	}
	release.Store(true)
	waitFor(t, 20*time.Second, "all acked after release", func() bool { return st.Stats().Acked == 3000 })
}

// TestRejectedBatchesDoNotBlock rejects two batches: they are counted by
// reason and the stream moves on past them.
func TestRejectedBatchesDoNotBlock(t *testing.T) {
	url := startMochi(t)
	_, st := openStream(t, "dev-reject")
	r := newResponder(t, url, func(b *wirepb.Batch, arrival int) verdict {
		switch b.FirstSeq {
		case 1:
			return verdict{reject: "bad_time: event 3 is stamped 2301-01-01"}
		case 1501:
			return verdict{reject: "too_fragmented"}
		}
		return verdict{}
	})
	appendEvents(t, st, 2000, 1000)
	u := newUplink(t, st, url, nil)
	runUplink(t, u)
	// A rejected range is a gap the uplink reports to the hub in the
	// batches it sends next; until one of them is answered the buffer
	// keeps the range (a restart sends it again rather than lose the
	// report), so the events after it are what frees it.
	waitFor(t, 20*time.Second, "both rejections recorded", func() bool { return u.Status().Gaps.Ranges == 2 })
	appendEvents(t, st, 500, 500)
	waitFor(t, 20*time.Second, "all acked", func() bool { return st.Stats().Acked == 2500 })
	r.check(t, 2500)
	for reason, want := range map[string]float64{"bad_time": 1, "too_fragmented": 1} {
		if got := value(u.m.Rejected.WithLabelValues(reason)); got != want {
			t.Errorf("rejected{reason=%s} = %v, want %v", reason, got, want)
		}
	}
	if got := value(u.m.BatchesAcked.WithLabelValues("rejected")); got != 2 {
		t.Errorf("batches acked rejected = %v, want 2", got)
	}
	gs := u.Status().Gaps
	if gs.Unreported != 0 || len(gs.Recent) != 2 || gs.Recent[0].First != 1 || gs.Recent[0].Reason != "rejected:bad_time" ||
		gs.Recent[1].First != 1501 || gs.Recent[1].Last != 2000 || gs.Recent[1].Reason != "rejected:too_fragmented" || gs.Events != 500+gs.Recent[0].Last {
		t.Fatalf("gap status %+v", gs)
	}
	if got := value(u.m.GapEvents.WithLabelValues("rejected:bad_time")); got != float64(gs.Recent[0].Last) {
		t.Errorf("gap_events{rejected:bad_time} = %v", got)
	}
	// The hub heard of both ranges, in the gaps of later batches.
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, want := range [][2]uint64{{1, gs.Recent[0].Last}, {1501, 2000}} {
		if !slices.Contains(r.gaps, want) {
			t.Errorf("gap %v never reported; reported %v", want, r.gaps)
		}
	}
}

// TestBrokerRestart kills Mosquitto mid-stream and starts it again on the
// same port; the uplink reconnects, resubscribes (the broker lost its
// sessions) and finishes.
func TestBrokerRestart(t *testing.T) {
	m := newMosquitto(t)
	_, st := openStream(t, "dev-restart")
	r := newResponder(t, m.URL(), nil)
	// The responder's paho client reconnects by itself, and paho v1.5.1
	// races with itself when it resumes stored QoS 1 publishes after an
	// auto-reconnect (client.resume sets the DUP flag while the writer
	// encodes the packet). QoS 0 answers are never stored; an answer lost
	// with the broker is what the uplink's resend is for.
	r.ackQoS = 0
	u := newUplink(t, st, m.URL(), func(o *Options) { o.MaxBatchEvents = 100; o.AckTimeout = 500 * time.Millisecond })
	runUplink(t, u)
	appendEvents(t, st, 2000, 100)
	waitFor(t, 20*time.Second, "first events acked", func() bool { return st.Stats().Acked > 0 })
	m.Kill()
	appendEvents(t, st, 2000, 100) // while the broker is down
	waitFor(t, 10*time.Second, "the uplink to notice", func() bool { return u.Status().State != StateConnected })
	time.Sleep(200 * time.Millisecond)
	m.Start()
	appendEvents(t, st, 2000, 100)
	waitFor(t, 30*time.Second, "all acked after the restart", func() bool { return st.Stats().Acked == 6000 })
	r.check(t, 6000)
	if s := u.Status(); s.Reconnects < 1 || s.State != StateConnected {
		t.Fatalf("status after restart: %+v", s)
	}
	t.Logf("reconnects %v, resent %v, connect failures %v", value(u.m.Reconnects), value(u.m.BatchesResent), value(u.m.ConnectFailures))
}

// TestNoLingerWithBacklog: a long linger must not delay a backlog (the
// partial batch at its end included), but does hold back a few new events.
func TestNoLingerWithBacklog(t *testing.T) {
	url := startMochi(t)
	_, st := openStream(t, "dev-linger")
	r := newResponder(t, url, nil)
	appendEvents(t, st, 3500, 1000)
	u := newUplink(t, st, url, func(o *Options) { o.MaxBatchEvents = 1000; o.Linger = time.Minute })
	runUplink(t, u)
	waitFor(t, 20*time.Second, "the backlog acked", func() bool { return st.Stats().Acked == 3500 })
	appendEvents(t, st, 10, 10)
	u.Notify()
	time.Sleep(300 * time.Millisecond)
	if got := r.eventCount(); got != 3500 {
		t.Fatalf("%d events arrived; the 10 new ones should linger", got)
	}
	appendEvents(t, st, 1000, 1000) // now a full batch is waiting
	u.Notify()
	waitFor(t, 20*time.Second, "the full batch acked", func() bool { return st.Stats().Acked >= 4500 })
}

// TestBandwidthCap sends about 25 KB of frames through an 8 KB/s cap. It asserts
// only what a slow machine cannot break (the cap is never exceeded beyond
// its burst; everything arrives in order) and logs the rate.
func TestBandwidthCap(t *testing.T) {
	url := startMochi(t)
	_, st := openStream(t, "dev-cap")
	r := newResponder(t, url, nil)
	appendEvents(t, st, 2500, 1000)
	const capBps = 8_000
	u := newUplink(t, st, url, func(o *Options) {
		o.MaxBatchEvents = 100
		o.MaxBatchBytes = 4096
		o.BandwidthBytesPerSec = capBps
	})
	start := time.Now()
	runUplink(t, u)
	waitFor(t, 30*time.Second, "all acked", func() bool { return st.Stats().Acked == 2500 })
	elapsed := time.Since(start)
	sent := value(u.m.BytesSent)
	rate := sent / elapsed.Seconds()
	t.Logf("sent %.0f bytes in %v: %.0f B/s against a cap of %d B/s", sent, elapsed.Round(time.Millisecond), rate, capBps)
	burst := float64(max(4096+4096, capBps)) // see newBucket
	if limit := burst + capBps*elapsed.Seconds(); sent > limit {
		t.Fatalf("sent %.0f bytes in %v, more than the cap allows (%.0f)", sent, elapsed, limit)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := 1; i < len(r.order); i++ {
		if r.order[i] <= r.order[i-1] {
			t.Fatalf("batches not sent oldest first: %v", r.order)
		}
	}
}

// TestStatusAndWill checks the retained online status on connect, the
// retained offline status on a clean shutdown, and the last will when the
// broker drops the connection.
func TestStatusAndWill(t *testing.T) {
	url := startMosquitto(t)
	_, st := openStream(t, "dev-status")
	appendEvents(t, st, 10, 10)
	var mu sync.Mutex
	var got []*wirepb.Status
	w := dialTest(t, url, "status-watcher", nil)
	tok := w.Subscribe(wire.StatusTopic("dev-status"), 1, func(_ mqtt.Client, m mqtt.Message) {
		s, err := wire.DecodeStatus(m.Payload(), wire.Limits{})
		if err != nil {
			t.Errorf("decode status: %v", err)
			return
		}
		mu.Lock()
		got = append(got, s)
		mu.Unlock()
	})
	if !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatal("subscribe status")
	}
	last := func() *wirepb.Status {
		mu.Lock()
		defer mu.Unlock()
		if len(got) == 0 {
			return nil
		}
		return got[len(got)-1]
	}
	u := newUplink(t, st, url, func(o *Options) { o.Version = "test-1"; o.StatusInterval = 200 * time.Millisecond })
	stop := runUplink(t, u)
	waitFor(t, 10*time.Second, "online status", func() bool { s := last(); return s != nil && s.Online })
	s := last()
	if s.DeviceId != "dev-status" || string(s.StreamId) != string(streamIDOf(st)) || s.Version != "test-1" || s.Backlog == nil {
		t.Fatalf("online status: %v", s)
	}
	waitFor(t, 10*time.Second, "periodic refresh", func() bool { mu.Lock(); defer mu.Unlock(); return len(got) >= 3 })
	stop()
	waitFor(t, 10*time.Second, "offline status", func() bool { s := last(); return s != nil && !s.Online })

	// The retained message is what a hub that starts later sees.
	var retained atomic.Pointer[wirepb.Status]
	w2 := dialTest(t, url, "status-late", nil)
	w2.Subscribe(wire.StatusTopic("dev-status"), 1, func(_ mqtt.Client, m mqtt.Message) {
		if s, err := wire.DecodeStatus(m.Payload(), wire.Limits{}); err == nil {
			retained.Store(s)
		}
	})
	waitFor(t, 10*time.Second, "retained offline status", func() bool { s := retained.Load(); return s != nil && !s.Online })
}

// TestLastWill: when the broker drops the uplink's connection, the broker
// publishes the retained last will (online=false); the uplink reconnects
// and publishes online=true again.
func TestLastWill(t *testing.T) {
	url, srv := testbroker.Embedded(t)
	_, st := openStream(t, "dev-will")
	var mu sync.Mutex
	var online []bool
	w := dialTest(t, url, "will-watcher", nil)
	w.Subscribe(wire.StatusTopic("dev-will"), 1, func(_ mqtt.Client, m mqtt.Message) {
		if s, err := wire.DecodeStatus(m.Payload(), wire.Limits{}); err == nil {
			mu.Lock()
			online = append(online, s.Online)
			mu.Unlock()
		}
	}).WaitTimeout(5 * time.Second)
	seen := func(want ...bool) bool {
		mu.Lock()
		defer mu.Unlock()
		i := 0
		for _, o := range online {
			if i < len(want) && o == want[i] {
				i++
			}
		}
		return i == len(want)
	}
	u := newUplink(t, st, url, nil)
	runUplink(t, u)
	waitFor(t, 10*time.Second, "online", func() bool { return seen(true) })
	cl, ok := srv.Clients.Get("edgeflow-dev-will")
	if !ok {
		t.Fatal("uplink's client not found on the broker")
	}
	cl.Stop(errors.New("test: drop the connection"))
	waitFor(t, 10*time.Second, "the will, then online again", func() bool { return seen(true, false, true) })
	if s := u.Status(); s.Reconnects != 1 {
		t.Fatalf("reconnects %d, want 1", s.Reconnects)
	}
}

// TestRefusedEventsRecorded: an OK answer that names events the hub
// refused frees the batch (the hub applied the rest and recorded them)
// and records them as gaps with their reason, in the status and metrics.
func TestRefusedEventsRecorded(t *testing.T) {
	url := startMochi(t)
	_, st := openStream(t, "dev-refused")
	r := newResponder(t, url, func(b *wirepb.Batch, arrival int) verdict {
		if b.FirstSeq == 1 {
			return verdict{refused: []*wirepb.Gap{{FirstSeq: 3, LastSeq: 4, Reason: "bad_value"}, {FirstSeq: 9, LastSeq: 9, Reason: "bad_time"},
				{FirstSeq: 1 << 40, LastSeq: 1 << 41, Reason: "bad_time"}}} // outside the batch: ignored
		}
		return verdict{}
	})
	appendEvents(t, st, 1000, 1000)
	u := newUplink(t, st, url, nil)
	runUplink(t, u)
	waitFor(t, 20*time.Second, "all acked", func() bool { return st.Stats().Acked == 1000 })
	r.check(t, 1000)
	gs := u.Status().Gaps
	if gs.Ranges != 2 || gs.Events != 3 || gs.Unreported != 0 || gs.Recent[0] != (GapRecord{3, 4, "refused:bad_value", gs.Recent[0].At}) ||
		gs.Recent[1] != (GapRecord{9, 9, "refused:bad_time", gs.Recent[1].At}) {
		t.Fatalf("gap status %+v", gs)
	}
	if got := value(u.m.GapEvents.WithLabelValues("refused:bad_value")); got != 2 {
		t.Errorf("gap_events{refused:bad_value} = %v", got)
	}
}
