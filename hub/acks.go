package hub

import (
	"log/slog"

	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// ackLoop publishes the acks of each committed group, in group order.
func (s *Server) ackLoop() {
	for g := range s.com.toAck {
		msgs := make([]Message, 0, len(g))
		for _, p := range g {
			if p.kind != entryBatch {
				s.m.statuses.Inc()
				continue
			}
			if m, ok := s.ackMessage(p); ok {
				msgs = append(msgs, m)
			}
		}
		if len(msgs) == 0 {
			continue
		}
		if err := s.tr.Publish(msgs); err != nil {
			s.m.ackErrors.Inc()
			s.rejLog.log(s.log, "ack", "", "publishing acks failed; agents will resend", err)
		}
	}
}

// ackMessage builds the ack of one batch and counts its outcome.
func (s *Server) ackMessage(p *pending) (Message, bool) {
	a := &wirepb.Ack{StreamId: p.stream[:], FirstSeq: p.first, LastSeq: p.last, ServerTimeNs: s.opts.Now().UnixNano()}
	switch {
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
	return Message{Topic: wire.AckTopic(p.device), Payload: payload}, true
}

// log writes one line unless one was written less than an interval ago;
// the next line says how many were suppressed.
func (r *rateLog) log(l *slog.Logger, what, device, msg string, err error) {
	r.mu.Lock()
	now := r.now()
	if !r.last.IsZero() && now.Sub(r.last) < r.every {
		r.suppressed++
		r.mu.Unlock()
		return
	}
	n := r.suppressed
	r.last, r.suppressed = now, 0
	r.mu.Unlock()
	l.Warn(msg, "kind", what, "device", device, "err", err, "suppressed_since_last", n)
}
