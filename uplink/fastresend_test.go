package uplink

import (
	"sync/atomic"
	"testing"
	"time"

	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// TestLostBatchResentBeforeTimeout loses the first delivery of two batches
// (the stand-in hub reads them and never answers, as when JetStream loses
// a batch its MQTT listener acknowledged) and answers the batches after
// them: the lost ones must be published again long before AckTimeout (5
// minutes; the test gives everything 60 s), each moved up exactly once.
func TestLostBatchResentBeforeTimeout(t *testing.T) {
	for _, b := range brokers {
		t.Run(b.name, func(t *testing.T) {
			url := b.start(t)
			_, st := openStream(t, "dev-fast")
			var dropped atomic.Int64
			r := newResponder(t, url, func(b *wirepb.Batch, arrival int) verdict {
				if arrival == 1 && (b.FirstSeq == 201 || b.FirstSeq == 1401) {
					dropped.Add(1)
					return verdict{drop: true}
				}
				return verdict{}
			})
			appendEvents(t, st, 3000, 1000)
			u := newUplink(t, st, url, func(o *Options) {
				o.MaxBatchEvents, o.Window, o.AckTimeout = 200, 8, 5*time.Minute
			})
			start := time.Now()
			runUplink(t, u)
			waitFor(t, 60*time.Second, "all acked without waiting for the ack timeout", func() bool { return st.Stats().Acked == 3000 })
			if time.Since(start) >= u.opts.AckTimeout {
				t.Fatalf("took %v, not less than the ack timeout", time.Since(start))
			}
			r.check(t, 3000)
			if dropped.Load() != 2 {
				t.Fatalf("dropped %d deliveries, want 2", dropped.Load())
			}
			if got := value(u.m.FastResends); got != 2 {
				t.Fatalf("fast resends %v, want 2 (one per lost batch)", got)
			}
			if got := value(u.m.BatchesResent); got != 2 {
				t.Fatalf("batches resent %v, want 2", got)
			}
		})
	}
}

// TestInOrderAnswersNoFastResend: a hub that answers every batch in the
// order it was published never causes a fast resend.
func TestInOrderAnswersNoFastResend(t *testing.T) {
	for _, b := range brokers {
		t.Run(b.name, func(t *testing.T) {
			url := b.start(t)
			_, st := openStream(t, "dev-inorder")
			r := newResponder(t, url, nil)
			appendEvents(t, st, 3000, 500)
			u := newUplink(t, st, url, func(o *Options) {
				o.MaxBatchEvents, o.Window, o.AckTimeout = 100, 16, 5*time.Minute
			})
			runUplink(t, u)
			waitFor(t, 60*time.Second, "all acked", func() bool { return st.Stats().Acked == 3000 })
			r.check(t, 3000)
			if got := value(u.m.FastResends); got != 0 {
				t.Fatalf("fast resends %v, want 0", got)
			}
			if got := value(u.m.BatchesResent); got != 0 {
				t.Fatalf("batches resent %v, want 0", got)
			}
		})
	}
}

// TestFastResendBounded: a hub that swaps the answers of consecutive
// batches, sends each answer three times and loses one batch's first
// delivery. Everything is acked without the ack timeout (5 minutes), and
// no batch is moved up more than once: fast resends stay within the
// batches published, and every resend is one (no timeout passed).
func TestFastResendBounded(t *testing.T) {
	url := startMochi(t)
	_, st := openStream(t, "dev-bounded")
	r := newResponder(t, url, func(b *wirepb.Batch, arrival int) verdict {
		if arrival == 1 && b.FirstSeq == 501 {
			return verdict{drop: true}
		}
		return verdict{dups: 2}
	})
	r.reorder = true
	appendEvents(t, st, 3000, 500)
	u := newUplink(t, st, url, func(o *Options) {
		o.MaxBatchEvents, o.Window, o.AckTimeout = 100, 16, 5*time.Minute
	})
	runUplink(t, u)
	waitFor(t, 60*time.Second, "all acked", func() bool { return st.Stats().Acked == 3000 })
	r.check(t, 3000)
	fast, resent, published := value(u.m.FastResends), value(u.m.BatchesResent), value(u.m.BatchesPublished)
	t.Logf("published %v, resent %v, fast resends %v, duplicate answers %v", published, resent, fast, value(u.m.BatchesAcked.WithLabelValues("duplicate")))
	if fast < 1 || fast > published || resent != fast {
		t.Fatalf("fast resends %v, resent %v, published %v: want 1..published fast resends and no other resend", fast, resent, published)
	}
	if got := value(u.m.AcksIgnored.WithLabelValues("unmatched")); got < 2*published {
		t.Fatalf("unmatched acks %v, want at least the %v extra copies", got, 2*published)
	}
}

// TestFastResendRule drives the rule with answers built by hand and a
// fixed clock: which batches an answer moves up, by how much, and how
// often.
func TestFastResendRule(t *testing.T) {
	_, st := openStream(t, "dev-rule")
	appendEvents(t, st, 60, 60)
	u := newUplink(t, st, "tcp://127.0.0.1:1", func(o *Options) { o.AckTimeout = 10 * time.Second }) // never run
	now := time.Unix(1000, 0)
	far := now.Add(time.Hour)
	// Six batches of ten, published in order (publishes 1..6); batch 3
	// (21..30) was published again since (publish 7), batch 2 was answered
	// RETRY_LATER.
	var fs []*flight
	for i := range 6 {
		f := &flight{first: uint64(10*i + 1), last: uint64(10*i + 10), sends: 1, sent: now, deadline: far, firstPub: uint64(i + 1), lastPub: uint64(i + 1)}
		fs = append(fs, f)
		u.win.push(f)
	}
	fs[2].sends, fs[2].lastPub = 2, 7
	fs[1].later = true
	sid := st.ID()
	ack := func(status wirepb.AckStatus, first, last uint64, at time.Time) {
		t.Helper()
		p, err := wire.EncodeAck(&wirepb.Ack{StreamId: sid[:], FirstSeq: first, LastSeq: last, Status: status})
		if err != nil {
			t.Fatal(err)
		}
		u.handleAck(p, at)
	}
	grace := u.fastResendGrace()
	if grace != time.Second {
		t.Fatalf("grace %v at a 10 s ack timeout, want the 1 s cap", grace)
	}
	// A range answer for batches 5 and 6 (41..60): batch 1 is moved up,
	// batch 2 (RETRY_LATER) and 3 (published again after) are not, and
	// batch 4 (first published before 5) is.
	ack(wirepb.AckStatus_ACK_STATUS_OK, 41, 60, now)
	want := []time.Time{now.Add(grace), far, far, now.Add(grace)}
	for i, w := range want {
		if !fs[i].deadline.Equal(w) || fs[i].fast != w.Before(far) {
			t.Fatalf("batch %d: deadline %v fast %v, want %v", i+1, fs[i].deadline, fs[i].fast, w)
		}
	}
	// The same answer again is unmatched and moves nothing.
	fs[0].deadline, fs[0].fast = far, false
	ack(wirepb.AckStatus_ACK_STATUS_DUPLICATE, 41, 60, now.Add(time.Second))
	if !fs[0].deadline.Equal(far) {
		t.Fatalf("a repeated answer moved batch 1 to %v", fs[0].deadline)
	}
	// A DUPLICATE answer for batch 4 is new evidence, but batch 1 was
	// moved up less than AckTimeout ago.
	ack(wirepb.AckStatus_ACK_STATUS_DUPLICATE, 31, 40, now.Add(5*time.Second))
	if !fs[0].deadline.Equal(far) {
		t.Fatalf("batch 1 moved up twice within the ack timeout: %v", fs[0].deadline)
	}
	// A later batch, first published after everything, answered once the
	// ack timeout has passed: batch 1 is moved up again, batch 3 now too.
	g := &flight{first: 61, last: 70, sends: 1, sent: now, deadline: far, firstPub: 8, lastPub: 8}
	u.win.push(g)
	at := now.Add(11 * time.Second)
	ack(wirepb.AckStatus_ACK_STATUS_OK, 61, 70, at)
	if !fs[0].deadline.Equal(at.Add(grace)) || !fs[2].deadline.Equal(at.Add(grace)) || !fs[1].deadline.Equal(far) {
		t.Fatalf("deadlines %v %v %v, want batches 1 and 3 at %v and batch 2 unmoved", fs[0].deadline, fs[1].deadline, fs[2].deadline, at.Add(grace))
	}
	if got := value(u.m.FastResends); got != 0 {
		t.Fatalf("fast resends %v before any publish, want 0", got)
	}
}
