package aggregate

import (
	"bytes"
	"testing"
	"time"
)

// TestRetireStream: a retired stream leaves Streams and Stats, stops
// holding the hub watermark back, survives a snapshot, and its (device,
// id) may start again as a new stream; retiring an unknown stream does
// nothing.
func TestRetireStream(t *testing.T) {
	clk := &fakeClock{now: t0.Add(time.Hour)}
	opt := testOptions()
	opt.Clock = clk.Now
	e := newEngine(t, opt)
	now := at(time.Hour)
	mustApply(t, e, batchOf("d", 1, now, ev{1, "temp", nil, 1, at(10 * time.Minute)}))
	mustApply(t, e, batchOf("d", 2, now, ev{1, "temp", nil, 2, at(50 * time.Minute)}))
	if st := e.Stats(); st.Streams != 2 || !st.Watermark.Equal(t0.Add(10*time.Minute)) {
		t.Fatalf("before: %d streams, watermark %v", st.Streams, st.Watermark)
	}
	e.RetireStream("d", sid(1))
	e.RetireStream("d", sid(9)) // unknown: nothing happens
	e.Tick()
	st := e.Stats()
	if st.Streams != 1 || len(e.Streams()) != 1 || e.Streams()[0].Stream != sid(2) {
		t.Fatalf("after: %d streams, %+v", st.Streams, e.Streams())
	}
	if !st.Watermark.Equal(t0.Add(50 * time.Minute)) {
		t.Fatalf("the retired stream still holds the watermark: %v", st.Watermark)
	}

	snap, err := e.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	r := newEngine(t, opt)
	if err := r.Restore(snap); err != nil {
		t.Fatal(err)
	}
	if again, _ := r.Snapshot(); !bytes.Equal(again, snap) {
		t.Fatal("snapshot of a restored engine differs")
	}
	for _, x := range []*Engine{e, r} {
		mustApply(t, x, batchOf("d", 1, now, ev{1, "temp", nil, 3, at(55 * time.Minute)}))
		if n := len(x.Streams()); n != 2 {
			t.Fatalf("stream started again: %d streams", n)
		}
	}
	s1, _ := e.Snapshot()
	s2, _ := r.Snapshot()
	if !bytes.Equal(s1, s2) {
		t.Fatal("restored engine diverges after the stream started again")
	}
}

// TestRestoreVersion2Snapshot: a snapshot written before streams could be
// retired (version 2: no retired flag) restores to the same state.
func TestRestoreVersion2Snapshot(t *testing.T) {
	opt := testOptions()
	e := newEngine(t, opt)
	mustApply(t, e, batchOf("d", 1, at(time.Hour), ev{1, "temp", nil, 1, at(10 * time.Minute)}))
	mustApply(t, e, batchOf("e", 2, at(time.Hour), ev{1, "temp", nil, 2, at(20 * time.Minute)}))
	v3, err := e.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	// Version 2's layout: Snapshot's, with streams as they were encoded.
	enc := &encoder{}
	enc.b = append(enc.b, snapshotMagic...)
	enc.uvarint(2)
	enc.varint(e.res)
	enc.f64(e.opt.SketchAccuracy)
	e.encodeClock(enc)
	enc.uvarint(uint64(len(e.streams)))
	for _, st := range e.streams {
		enc.str(st.device)
		enc.b = append(enc.b, st.id[:]...)
		enc.varint(st.wm)
		enc.bool(st.has)
		enc.varint(st.lastArrival)
		enc.bool(st.backlog)
	}
	e.encodeSeriesVersion(enc, 2)
	e.encodeMerged(enc)
	e.encodeLateLog(enc)
	e.encodeQuarantine(enc)
	e.encodeStore(enc)
	r := newEngine(t, opt)
	if err := r.Restore(enc.b); err != nil {
		t.Fatal(err)
	}
	if got, _ := r.Snapshot(); !bytes.Equal(got, v3) {
		t.Fatal("a version 2 snapshot restores to a different state")
	}
}
