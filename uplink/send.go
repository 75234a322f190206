package uplink

import (
	"fmt"
	"sync"
	"time"

	"edgeflow/buffer"
	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// pump does everything the send loop can do now while connected: refresh
// the status, queue timed-out batches again, publish queued batches oldest
// first, and read new batches while the window has room. It stops early
// when the bandwidth cap or a failed publish says to wait. Only a closed
// buffer is an error.
func (u *Uplink) pump(now time.Time) error {
	if u.conn == nil {
		return nil
	}
	if !now.Before(u.statusDue) {
		u.publishStatus()
	}
	for _, f := range u.win.q {
		if !f.done && !f.queued && !now.Before(f.deadline) {
			f.queued = true
		}
	}
	for _, f := range u.win.q {
		if f.queued && !u.publish(f, now) {
			return nil
		}
	}
	for u.win.len() < u.opts.Window {
		if u.draining && u.win.len() > 0 && u.opts.Window-u.win.len() < u.refill() {
			// Draining a backlog with most of the window in flight: wait
			// for a few acks and read their batches in one pass, rather
			// than one buffer read (a Badger seek and a block copy) per ack.
			return nil
		}
		fs, err := u.readBatches(now, u.opts.Window-u.win.len())
		if err != nil {
			if errClosed(err) {
				return wrapStream(err)
			}
			u.warn(&u.warnLog, "uplink: read buffer", "from", u.next, "err", err)
			return nil
		}
		if len(fs) == 0 {
			return nil
		}
		for _, f := range fs {
			u.win.push(f)
			u.m.InFlight.Inc()
		}
		for _, f := range fs {
			if !u.publish(f, now) {
				return nil
			}
		}
	}
	return nil
}

// refill is how many window slots must be free before a draining uplink
// reads more: a quarter of the window, so three quarters stay in flight.
func (u *Uplink) refill() int { return max(1, u.opts.Window/4) }

// ready says whether to build a batch now: always without linger or with
// a backlog behind the last batch or a full batch waiting; otherwise once
// the first waiting event has lingered long enough.
func (u *Uplink) ready(now time.Time) bool {
	s := u.st.Stats()
	if s.Next <= u.next {
		// Nothing appended that is not in flight: no read (a Badger seek
		// when the records are not in the tail cache) to find that out.
		u.lingerSince, u.lingered = time.Time{}, false
		return false
	}
	linger := u.opts.linger()
	if linger == 0 || u.draining {
		return true
	}
	if u.lingered || s.Next-u.next >= uint64(u.opts.MaxBatchEvents) {
		return true
	}
	if u.lingerSince.IsZero() {
		u.lingerSince = now
	}
	return now.Sub(u.lingerSince) >= linger
}

// readBatches reads up to n batches from the buffer in one pass and
// encodes them, or returns none if there is nothing to send yet. One pass
// rather than one read per batch matters because the buffer's blocks hold
// up to 256 KiB of records: a read per batch would fetch (and Badger
// copy) the same block once for every batch cut from it. The linger
// applies to the first batch only, as it did when a backlog behind a
// batch made the next one go at once.
func (u *Uplink) readBatches(now time.Time, n int) ([]*flight, error) {
	if n <= 0 || !u.ready(now) {
		return nil, nil
	}
	if fs, err := u.readColumnBatches(n); len(fs) > 0 || err != nil {
		return fs, err
	}
	maxEvents, maxBytes := u.opts.MaxBatchEvents, u.opts.MaxBatchBytes
	as := make([]*assembly, 0, n)
	defer func() {
		for _, a := range as {
			assemblies.Put(a)
		}
	}()
	var a *assembly
	closed := false // a ends here: the end of a block that could go as stored
	add := func(seq uint64, rec []byte, block buffer.Range, columns bool) bool {
		// A batch is consecutive events; the buffer's records jump across
		// a range it dropped, and the rest goes in the next batch. With
		// column blocks, a block of half a batch or more starts a batch
		// unless it fits whole in the current one, and ends it and the
		// pass: batches then stay on the boundaries of blocks
		// readColumnBatches can send as stored, once past a block it could
		// not.
		large := columns && u.wholeBatch(block.Len())
		if a == nil || closed || seq != a.last+1 || a.n == maxEvents || a.size+len(rec) > maxBytes ||
			(large && seq == block.First && a.n+int(block.Len()) > maxEvents) {
			if len(as) == n || closed {
				// Past such a block the pass ends: the next one tries
				// readColumnBatches again.
				return false
			}
			a = assemblies.Get().(*assembly)
			a.reset()
			as = append(as, a)
		}
		a.size += len(rec)
		a.add(seq, u.retime(seq, rec))
		closed = large && seq == block.Last
		return true
	}
	var err error
	if bs, ok := u.st.(blockStream); ok && u.codec == wire.CodecColumns {
		_, err = bs.ScanBlocks(u.next, n*maxEvents, n*maxBytes, add)
	} else {
		_, err = u.st.Scan(u.next, n*maxEvents, n*maxBytes, func(seq uint64, rec []byte) bool { return add(seq, rec, buffer.Range{}, false) })
	}
	if err != nil {
		return nil, err
	}
	u.lingerSince = time.Time{}
	if len(as) == 0 {
		// Appended but not readable yet (a buffer that syncs on an
		// interval): they have waited their linger, so they go as soon as
		// the buffer says they are readable, without a second one.
		u.draining, u.lingered = false, true
		return nil, nil
	}
	u.lingered = false
	return u.frameBatches(len(as), func(i int) (uint64, uint64) { return as[i].first, as[i].last },
		func(i int, hdr *wirepb.Batch) ([]byte, error) { return u.encode(as[i], hdr) })
}

// frameBatches makes the flights of a pass's n batches, in order: rangeOf
// gives batch i's sequence numbers and frame its frame behind hdr. One
// header serves the pass: the backlog, gaps and clock estimate are read
// once, not once per batch; each batch gets its first sequence number, a
// send time and the parts of the gaps below its first event (gapsBefore).
// A batch that cannot be framed ends the pass; it and the rest are read
// again next time.
func (u *Uplink) frameBatches(n int, rangeOf func(i int) (first, last uint64), frame func(i int, hdr *wirepb.Batch) ([]byte, error)) ([]*flight, error) {
	stats := u.st.Stats()
	hdr := u.batchHeader(stats)
	gaps := hdr.Gaps
	fs := make([]*flight, 0, n)
	for i := range n {
		first, last := rangeOf(i)
		hdr.Gaps = gapsBefore(nil, gaps, first)
		hdr.FirstSeq, hdr.SendTimeNs = first, u.opts.Now().UnixNano()
		payload, err := frame(i, hdr)
		if err != nil {
			if len(fs) > 0 {
				return fs, nil
			}
			return nil, err
		}
		u.next = last + 1
		u.draining = stats.Next > u.next
		fs = append(fs, &flight{first: first, last: last, payload: payload, queued: true, reports: u.reportsUpTo(first)})
	}
	return fs, nil
}

// assembly collects the events of the batch being built, already in their
// wire form, in buffers reused from batch to batch: the records are copied
// once out of the buffer's read and once into the frame's body, and neither
// copy allocates once the buffers have grown. Assemblies are pooled rather
// than kept per Uplink, so a process with thousands of mostly idle uplinks
// (the fleet simulator) holds a few, not one each.
type assembly struct {
	first, last uint64
	n           int
	size        int    // stored record bytes, for MaxBatchBytes
	events      []byte // the batch's events fields (wire.AppendEvent)
	body        []byte // header and events, before framing
}

var assemblies = sync.Pool{New: func() any { return new(assembly) }}

func (a *assembly) reset() { a.first, a.last, a.n, a.size, a.events = 0, 0, 0, 0, a.events[:0] }

func (a *assembly) add(seq uint64, rec []byte) {
	if a.n == 0 {
		a.first = seq
	}
	a.last = seq
	a.n++
	a.events = wire.AppendEvent(a.events, rec)
}

// retime applies the Retime hook to one record; a failure sends the record
// as stored.
func (u *Uplink) retime(seq uint64, rec []byte) []byte {
	if u.opts.Retime == nil {
		return rec
	}
	fixed, err := u.opts.Retime(rec)
	if err != nil {
		u.m.RetimeErrors.Inc()
		u.warn(&u.warnLog, "uplink: retime failed, sending the event as stored", "seq", seq, "err", err)
		return rec
	}
	return fixed
}

// batchHeader is the header fields every batch of one read pass shares:
// device, stream, backlog figures, gaps and the clock estimate.
func (u *Uplink) batchHeader(stats buffer.Stats) *wirepb.Batch {
	hdr := &wirepb.Batch{
		DeviceId: u.opts.DeviceID,
		StreamId: u.sid[:],
		Backlog:  &wirepb.Backlog{Events: stats.Depth, Bytes: uint64(max(stats.Bytes, 0)), OldestNs: stats.OldestMs * int64(time.Millisecond)},
		// handleAck takes an ack for a run of batches.
		RangeAcks: true,
	}
	for _, g := range u.st.Gaps() {
		hdr.Gaps = append(hdr.Gaps, &wirepb.Gap{FirstSeq: g.First, LastSeq: g.Last, Reason: g.Reason})
	}
	// Batches the hub rejected whole, reported as the buffer's drops are
	// (gaps.go).
	for _, g := range u.unreported {
		hdr.Gaps = append(hdr.Gaps, &wirepb.Gap{FirstSeq: g.First, LastSeq: g.Last, Reason: g.Reason})
	}
	if u.opts.Clock != nil {
		hdr.Clock = u.opts.Clock()
	}
	return hdr
}

// gapsBefore appends to dst the parts of gaps below first. The gaps are
// read after the pass's records, so a drop in between (the device appending
// at its bound) can report records the pass's batches carry; hubd rejects a
// batch whose gaps overlap its events, which would lose them. What lies at
// or above first is delivered by this batch or the next ones of the pass,
// and what they do not carry stays pending and goes in the header of the
// batch after it (a gap leaves the buffer only with an ack that covers it).
func gapsBefore(dst, gaps []*wirepb.Gap, first uint64) []*wirepb.Gap {
	for _, g := range gaps {
		switch {
		case g.LastSeq < first:
			dst = append(dst, g)
		case g.FirstSeq < first:
			dst = append(dst, &wirepb.Gap{FirstSeq: g.FirstSeq, LastSeq: first - 1, Reason: g.Reason})
		}
	}
	return dst
}

// encode frames the assembled batch behind hdr, without decoding the
// events.
func (u *Uplink) encode(a *assembly, hdr *wirepb.Batch) ([]byte, error) {
	body, err := wire.AppendBatchHeader(a.body[:0], hdr)
	if err != nil {
		return nil, fmt.Errorf("uplink: encode batch from %d: %w", a.first, err)
	}
	a.body = append(body, a.events...)
	return wire.FrameWith(wire.MsgBatch, u.codec, a.body), nil
}

// ackTimeout is the wait for an answer after the n-th publish of a batch:
// AckTimeout doubled per resend, capped at MaxAckTimeout, so a hub that is
// down while the broker is up gets a slowing trickle of resends.
func (u *Uplink) ackTimeout(sends int) time.Duration {
	d := u.opts.AckTimeout
	for i := 1; i < sends && d < u.opts.MaxAckTimeout; i++ {
		d *= 2
	}
	return min(d, u.opts.MaxAckTimeout)
}

// publish hands a batch to paho at QoS 1 unless the bandwidth cap says to
// wait. It reports whether the batch went out.
//
// Paho's token for a batch is deliberately not waited on. The broker's
// PUBACK frees nothing here: only the hub's ack does, which also makes paho
// traps #563 and #565 harmless (after a reconnect a token can complete
// without error though no PUBACK ever came). A token that never completes
// (paho #613) is dropped with its client. Only an error that is already
// known (not connected, writer timeout) is acted on: the batch stays queued.
// Paho has no general limit on QoS 1 messages in flight (paho #520); the
// window is that limit.
func (u *Uplink) publish(f *flight, now time.Time) bool {
	if u.bw != nil {
		if d := u.bw.take(len(f.payload), now); d > 0 {
			u.bwUntil = now.Add(d)
			return false
		}
	}
	tok := u.conn.cli.Publish(wire.BatchTopic(u.opts.DeviceID), 1, false, f.payload)
	select {
	case <-tok.Done():
		if err := tok.Error(); err != nil {
			u.setState(StateConnected, err)
			u.warn(&u.warnLog, "uplink: publish failed", "first", f.first, "last", f.last, "err", err)
			return false
		}
	default:
	}
	f.queued, f.later = false, false
	f.sends++
	f.sent = now
	u.pubs++
	f.lastPub = u.pubs
	if f.firstPub == 0 {
		f.firstPub = u.pubs
	}
	f.deadline = now.Add(u.ackTimeout(f.sends))
	if f.sends == 1 {
		u.m.BatchesPublished.Inc()
		u.m.EventsPublished.Add(float64(f.events()))
	} else {
		u.m.BatchesResent.Inc()
	}
	if f.fast {
		u.m.FastResends.Inc()
		f.fast = false
	}
	u.m.BytesSent.Add(float64(len(f.payload)))
	return true
}
