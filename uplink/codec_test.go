package uplink

import (
	"sync/atomic"
	"testing"
	"time"

	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// Against a hub older than the columnar codec, which refuses columnar
// batches without naming them, the uplink rewrites what it has in flight as
// zstd, sends zstd from then on, and every event arrives.
func TestOldHubGetsZstd(t *testing.T) {
	url := startMosquitto(t)
	_, st := openStream(t, "dev-oldhub")
	appendEvents(t, st, 3000, 1000)
	r := newResponder(t, url, nil)
	r.oldHub = true
	u := newUplink(t, st, url, nil) // columns, the default
	stop := runUplink(t, u)
	waitFor(t, 30*time.Second, "buffer acked through the last event", func() bool { return st.Stats().Acked == 3000 })
	stop() // the send loop owns u.codec
	r.check(t, 3000)
	r.mu.Lock()
	refused := r.refusedColumns
	r.mu.Unlock()
	if refused == 0 {
		t.Fatal("no columnar batch reached the old hub: the test tests nothing")
	}
	if n := value(u.m.CodecFallbacks); n == 0 || value(u.m.Rejected) != 0 {
		t.Fatalf("fallbacks %v, rejections %v: want some and none", n, value(u.m.Rejected))
	}
	if u.codec != wire.CodecZstd {
		t.Fatalf("the uplink went on with %v after the old hub's refusal, want zstd", u.codec)
	}
}

// A current hub that refuses a columnar batch as malformed gets it again
// as zstd before anything is dropped.
func TestMalformedColumnsResentAsZstd(t *testing.T) {
	url := startMosquitto(t)
	_, st := openStream(t, "dev-refuse")
	appendEvents(t, st, 2000, 1000)
	var refusedOnce atomic.Bool
	r := newResponder(t, url, func(b *wirepb.Batch, arrival int) verdict {
		if b.FirstSeq == 501 && arrival == 1 {
			refusedOnce.Store(true)
			return verdict{reject: "malformed: columnar batch: something the hub disliked"}
		}
		return verdict{}
	})
	u := newUplink(t, st, url, nil)
	stop := runUplink(t, u)
	waitFor(t, 30*time.Second, "buffer acked through the last event", func() bool { return st.Stats().Acked == 2000 })
	stop() // the send loop owns u.codec
	r.check(t, 2000)
	if !refusedOnce.Load() {
		t.Fatal("the batch from 501 never arrived")
	}
	if n := value(u.m.CodecFallbacks); n != 1 || value(u.m.Rejected) != 0 {
		t.Fatalf("fallbacks %v, rejections %v: want 1 and 0", n, value(u.m.Rejected))
	}
	if u.codec != wire.CodecColumns {
		t.Fatalf("the uplink went on with %v after one refused batch, want columns", u.codec)
	}
	// A rejection of a zstd batch stays a rejection.
	if u.columnsRefused(&flight{payload: wire.FrameWith(wire.MsgBatch, wire.CodecZstd, make([]byte, 600))}, wirepb.AckStatus_ACK_STATUS_REJECTED, "malformed: x") {
		t.Fatal("a zstd batch was handled as a refused columnar one")
	}
}
