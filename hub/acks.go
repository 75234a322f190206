package hub

import (
	"log/slog"
	"sync"

	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// ackPublishes bounds the ack Publish calls awaiting their PUBACKs at once.
const ackPublishes = 4

// ackLoop publishes the acks of the committed groups, oldest first, with
// up to ackPublishes Publish calls awaiting their PUBACKs at once; groups
// committed while every call is waiting go out together in the next one.
// A Publish waits a broker round trip, and behind a busy hub connection
// that round trip is long (the PUBACKs queue behind the batches the broker
// is delivering): waiting it out before the next group's acks would add it
// to every batch's latency and make it the pipeline's pace. Acks may thus
// reach the broker out of group order, which agents accept. The loop
// returns once every Publish it started has returned.
func (s *Server) ackLoop() {
	var wg sync.WaitGroup
	defer wg.Wait()
	slots := make(chan struct{}, ackPublishes)
	for g := range s.com.toAck {
		msgs, arrived := s.appendAcks(nil, nil, g)
		for more := true; more; {
			select {
			case g, ok := <-s.com.toAck:
				if ok {
					msgs, arrived = s.appendAcks(msgs, arrived, g)
				}
				more = ok
			default:
				more = false
			}
		}
		if len(msgs) == 0 {
			continue
		}
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			if err := s.tr.Publish(msgs); err != nil {
				s.m.ackErrors.Inc()
				s.rejLog.log(s.log, "ack", "", "publishing acks failed; agents will resend", err)
				return
			}
			now := s.opts.Now().UnixNano()
			for _, at := range arrived {
				s.m.ackSeconds.Observe(float64(now-at) / 1e9)
			}
		}()
	}
}

// appendAcks appends the acks of one group's batches to msgs, and their
// arrival times to arrived, and counts the group's status messages.
func (s *Server) appendAcks(msgs []Message, arrived []int64, g []*pending) ([]Message, []int64) {
	for _, p := range g {
		if p.kind != entryBatch {
			if p.kind == entryStatus {
				s.m.statuses.Inc()
			}
			continue
		}
		if m, ok := s.ackMessage(p); ok {
			msgs = append(msgs, m)
			arrived = append(arrived, p.serverTimeNs)
		}
	}
	return msgs, arrived
}

// ackMessage builds the ack of one batch and counts its outcome.
func (s *Server) ackMessage(p *pending) (Message, bool) {
	a := &wirepb.Ack{StreamId: p.stream[:], FirstSeq: p.first, LastSeq: p.last, ServerTimeNs: s.opts.Now().UnixNano()}
	switch {
	case p.rej != nil && p.rej.Retry():
		a.Status, a.Reason = wirepb.AckStatus_ACK_STATUS_RETRY_LATER, p.rej.AckReason()
		a.RetryAfterNs = int64(s.limiter.retryAfter(p.device, a.ServerTimeNs))
		s.m.batches.WithLabelValues("retry_later").Inc()
		s.m.rejected.WithLabelValues(string(p.rej.Reason)).Inc()
		s.rejLog.log(s.log, "batch", p.device, "batch refused for now; the agent resends it", p.rej)
	case p.rej != nil:
		a.Status, a.Reason = wirepb.AckStatus_ACK_STATUS_REJECTED, p.rej.AckReason()
		s.m.batches.WithLabelValues("rejected").Inc()
		s.m.rejected.WithLabelValues(string(p.rej.Reason)).Inc()
		s.rejLog.log(s.log, "batch", p.device, "rejected batch", p.rej)
	case p.dup:
		a.Status = wirepb.AckStatus_ACK_STATUS_DUPLICATE
		s.m.batches.WithLabelValues("duplicate").Inc()
	default:
		a.Status = wirepb.AckStatus_ACK_STATUS_OK
		s.m.batches.WithLabelValues("ok").Inc()
	}
	payload, err := wire.EncodeAck(a)
	if err != nil {
		s.log.Error("encode ack", "device", p.device, "err", err)
		return Message{}, false
	}
	return Message{Topic: wire.AckTopic(p.device), Payload: payload, AtMostOnce: !s.opts.AcksAtLeastOnce}, true
}

// log writes one line unless one was written less than an interval ago;
// the next line says how many were suppressed.
func (r *rateLog) log(l *slog.Logger, what, device, msg string, err error) {
	r.mu.Lock()
	ok, n := r.lim.Allow(r.now())
	r.mu.Unlock()
	if !ok {
		return
	}
	l.Warn(msg, "kind", what, "device", device, "err", err, "suppressed_since_last", n)
}
