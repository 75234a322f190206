package hub

import (
	"hash/fnv"
	"sync"
	"time"

	"edgeflow/hub/batchview"
	"edgeflow/hub/hublog"
	"edgeflow/internal/lograte"
	"edgeflow/wire"
)

// inMsg is a batch on its way to a decode worker.
type inMsg struct {
	device       string
	payload      []byte
	serverTimeNs int64
	// logPart and logSeq are the batch's partition and sequence in the
	// cluster's stream (logSeq 0: not read from a stream).
	logPart int
	logSeq  uint64
	// streamKind and streamID are the stream message's natslog.HeaderKind
	// and Nats-Msg-Id: a kind set marks an entry that is not a batch
	// (cluster_attrs.go).
	streamKind, streamID string
	// logGen is the partition's ownership generation its reader was
	// started under (own.go); the committer and the applier discard the
	// message once the partition's generation has moved on.
	logGen uint64
	// ctl, when set, is handed to the committer as it is (an ownership
	// entry or a barrier, own.go), in order with the worker's messages.
	ctl *pending
}

// handle is the Transport's MessageHandler: it stamps the arrival time and
// routes the message by topic. It never panics and never blocks once the
// server is closing.
func (s *Server) handle(topic string, payload []byte) {
	defer s.recoverMessage(topic)
	now := s.opts.Now().UnixNano()
	device, kind, err := wire.ParseTopic(topic)
	if err != nil {
		s.m.dropped.WithLabelValues("bad_topic").Inc()
		return
	}
	switch kind {
	case wire.KindBatch:
		s.enqueue(func() { s.workers[s.workerFor(device)] <- inMsg{device: device, payload: payload, serverTimeNs: now} })
	case wire.KindStatus:
		s.handleStatus(device, payload, now)
	case wire.KindTimeReq:
		if ts := s.timeService(); ts != nil {
			ts.HandleRequest(topic, payload)
		}
	default:
		s.m.dropped.WithLabelValues("unexpected_kind").Inc()
	}
}

// recoverMessage is the last line of defence of a handler goroutine.
func (s *Server) recoverMessage(topic string) {
	if r := recover(); r != nil {
		s.m.panics.Inc()
		s.log.Error("recovered panic handling message", "topic", topic, "panic", r)
	}
}

// enqueue runs send (a channel send into the pipeline) unless the server
// is closing; the read lock keeps the pipeline's channels open meanwhile.
func (s *Server) enqueue(send func()) {
	s.inMu.RLock()
	defer s.inMu.RUnlock()
	if s.inClosed {
		s.m.dropped.WithLabelValues("closing").Inc()
		return
	}
	send()
}

// workerFor picks the decode worker of a device, so a device's batches are
// decoded and committed in the order they arrived.
func (s *Server) workerFor(device string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(device))
	return int(h.Sum32() % uint32(len(s.workers)))
}

// handleStatus logs a device's status message (retained or last will).
func (s *Server) handleStatus(device string, payload []byte, now int64) {
	st, err := wire.DecodeStatus(payload, s.opts.Limits)
	if err != nil || (st.GetDeviceId() != "" && st.GetDeviceId() != device) {
		s.m.dropped.WithLabelValues("bad_status").Inc()
		s.rejLog.log(s.log, "status", device, "bad status message", err)
		return
	}
	p := &pending{kind: hublog.KindStatus, device: device, serverTimeNs: now, payload: payload}
	s.enqueue(func() { s.com.in <- p })
}

// decodeLoop is one decode worker.
func (s *Server) decodeLoop(in <-chan inMsg) {
	for msg := range in {
		if msg.ctl != nil {
			s.com.in <- msg.ctl
			continue
		}
		s.com.in <- s.decode(msg)
	}
}

// decode unframes, parses and validates one batch. A failure yields a
// pending with a rejection (or an internal error, for a panic).
func (s *Server) decode(msg inMsg) (p *pending) {
	if msg.streamKind != "" {
		return s.decodeStreamEntry(msg)
	}
	p = &pending{kind: hublog.KindBatch, device: msg.device, serverTimeNs: msg.serverTimeNs, payload: msg.payload,
		logPart: msg.logPart, logSeq: msg.logSeq, logGen: msg.logGen}
	defer func() {
		if r := recover(); r != nil {
			s.m.panics.Inc()
			s.log.Error("recovered panic decoding batch", "device", msg.device, "panic", r)
			p.view, p.rej = nil, &batchview.Rejection{Reason: batchview.ReasonInternal, Detail: "the hub failed to handle this batch"}
		}
	}()
	v := s.views.Get().(*batchview.View)
	err := batchview.ParseBatchFrame(v, msg.payload, s.opts.Limits)
	if err == nil {
		err = batchview.ValidateBatch(v, msg.device)
	}
	if err == nil {
		err = s.limiter.Take(msg.device, v.Len(), msg.serverTimeNs)
	}
	p.describe(v)
	if err != nil {
		p.rej = batchview.AsRejection(err)
		s.views.Put(v)
		return p
	}
	p.view = v
	p.times.Prepare(v, p.first, p.last)
	return p
}

// describe copies the stream and range the ack will name, as far as the
// (possibly invalid) view tells them.
func (p *pending) describe(v *batchview.View) {
	if len(v.StreamID) == len(p.stream) {
		copy(p.stream[:], v.StreamID)
	}
	p.first, p.rangeAcks = v.FirstSeq, v.RangeAcks
	if n := uint64(v.Len()); n > 0 && v.FirstSeq > 0 && v.FirstSeq+n-1 >= v.FirstSeq {
		p.last = v.FirstSeq + n - 1
	}
}

// rateLog limits rejection logs to one line per interval.
type rateLog struct {
	mu  sync.Mutex
	lim lograte.Limiter
	now func() time.Time
}

// handleFrom is the identified transport's handler: a batch published by a
// verified device for another device is refused before it is decoded (not
// acked: the ack topic belongs to the device in the topic), counted as
// REJECTED with reason identity_mismatch, and logged at a limited rate.
func (s *Server) handleFrom(topic, identity string, payload []byte) {
	if identity != "" {
		if device, kind, err := wire.ParseTopic(topic); err == nil && kind == wire.KindBatch && device != identity {
			s.m.batches.WithLabelValues("rejected").Inc()
			s.m.rejected.WithLabelValues(string(batchview.ReasonIdentityMismatch)).Inc()
			s.rejLog.log(s.log, "batch", device, "rejected batch",
				batchview.Reject(batchview.ReasonIdentityMismatch, "published by device %q for device %q", identity, device))
			return
		}
	}
	s.handle(topic, payload)
}
