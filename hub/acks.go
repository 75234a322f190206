package hub

import (
	"bytes"
	"cmp"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"edgeflow/hub/batchview"
	"edgeflow/hub/broker"
	"edgeflow/hub/hublog"
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
		var r ackRound
		r.add(s, g)
		for more := true; more; {
			select {
			case g, ok := <-s.com.toAck:
				if ok {
					r.add(s, g)
				}
				more = ok
			default:
				more = false
			}
		}
		msgs, arrived := r.messages(s), r.arrived
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
			s.m.ackMessages.Add(float64(len(msgs)))
			now := s.opts.Now().UnixNano()
			for _, at := range arrived {
				s.m.ackSeconds.Observe(float64(now-at) / 1e9)
			}
		}()
	}
}

// ackRound gathers the acks of the groups one Publish call carries. A run
// of consecutive batches of one stream answered alike, OK or DUPLICATE,
// gets one ack for the run when its agent says it takes that (range_acks):
// an agent draining a backlog has its whole window in one group, and an
// ack per batch then costs the hub, the broker and the agent a message
// each, and the agent a buffer commit each.
type ackRound struct {
	items   []ackItem
	arrived []int64 // every answered batch's arrival
}

// ackItem is one batch's ack, before runs are merged.
type ackItem struct {
	key    hublog.StreamKey
	a      *wirepb.Ack
	ranged bool // may join a run: OK or DUPLICATE, and the agent said range_acks
}

// add takes the acks of one group's batches and counts the group's status
// messages.
func (r *ackRound) add(s *Server, g []*pending) {
	for _, p := range g {
		if p.stale {
			continue // its partition is no longer this hub's: its owner answers
		}
		if p.kind != hublog.KindBatch {
			if p.kind == hublog.KindStatus {
				s.m.statuses.Inc()
			}
			continue
		}
		a := s.ackFor(p)
		r.arrived = append(r.arrived, p.serverTimeNs)
		// An ack naming refused events answers its batch alone: a run's
		// ack has one range and no room for them.
		r.items = append(r.items, ackItem{hublog.StreamKey{Device: p.device, ID: p.stream}, a, p.rangeAcks && wire.RunAckStatus(a.Status) && len(a.Refused) == 0})
	}
}

// messages merges the round's runs and encodes its acks. A stream's
// batches need not come in order (the broker's client may hand over
// messages concurrently), so the acks are sorted by stream and first
// sequence number first; agents take acks in any order.
func (r *ackRound) messages(s *Server) []broker.Message {
	slices.SortFunc(r.items, func(x, y ackItem) int {
		if c := strings.Compare(x.key.Device, y.key.Device); c != 0 {
			return c
		}
		if c := bytes.Compare(x.key.ID[:], y.key.ID[:]); c != 0 {
			return c
		}
		return cmp.Compare(x.a.FirstSeq, y.a.FirstSeq)
	})
	msgs := make([]broker.Message, 0, len(r.items))
	var run *ackItem // the last ack kept, which the next may extend
	keep := func() {
		if m, ok := s.ackMessage(run.key.Device, run.a); ok {
			msgs = append(msgs, m)
		}
	}
	for i := range r.items {
		it := &r.items[i]
		if it.ranged && run != nil && run.ranged && run.key == it.key && run.a.Status == it.a.Status && run.a.LastSeq+1 == it.a.FirstSeq {
			run.a.LastSeq, run.a.ServerTimeNs = it.a.LastSeq, max(run.a.ServerTimeNs, it.a.ServerTimeNs)
			continue
		}
		if run != nil {
			keep()
		}
		run = it
	}
	if run != nil {
		keep()
	}
	return msgs
}

// ackFor decides the ack of one batch and counts its outcome.
func (s *Server) ackFor(p *pending) *wirepb.Ack {
	a := &wirepb.Ack{StreamId: p.stream[:], FirstSeq: p.first, LastSeq: p.last, ServerTimeNs: s.opts.Now().UnixNano()}
	switch {
	case p.rej != nil && p.rej.Retry():
		a.Status, a.Reason = wirepb.AckStatus_ACK_STATUS_RETRY_LATER, p.rej.AckReason()
		a.RetryAfterNs = p.retryAfterNs
		if a.RetryAfterNs == 0 {
			a.RetryAfterNs = int64(s.limiter.RetryAfter(p.device, a.ServerTimeNs))
		}
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
		a.Refused, a.RefusedEvents = p.refused, refusedEvents(p.refused)
	default:
		a.Status = wirepb.AckStatus_ACK_STATUS_OK
		s.m.batches.WithLabelValues("ok").Inc()
		a.Refused, a.RefusedEvents = p.refused, refusedEvents(p.refused)
		s.countRefused(p)
	}
	return a
}

// refusedEvents counts the events of an ack's refused ranges.
func refusedEvents(gs []*wirepb.Gap) uint64 {
	var n uint64
	for _, g := range gs {
		n += g.LastSeq - g.FirstSeq + 1
	}
	return n
}

// countRefused counts and logs the events of a logged batch that the hub
// refused one by one (its new sequence numbers only: a redelivery counts
// nothing again).
func (s *Server) countRefused(p *pending) {
	if len(p.entry.Refused) == 0 {
		return
	}
	for _, r := range p.entry.Refused {
		s.m.refused.WithLabelValues(r.Fault.Reason()).Add(float64(r.Len()))
	}
	r := p.refused[0]
	s.rejLog.log(s.log, "batch", p.device, "events refused, the rest of the batch applied", &batchview.Rejection{Reason: batchview.Reason(r.Reason), Detail: fmt.Sprintf("%d events refused, first [%d, %d] %s", refusedEvents(p.refused), r.FirstSeq, r.LastSeq, r.Reason)})
}

// ackMessage encodes an ack for device's ack topic.
func (s *Server) ackMessage(device string, a *wirepb.Ack) (broker.Message, bool) {
	payload, err := wire.EncodeAck(a)
	if err != nil {
		s.log.Error("encode ack", "device", device, "err", err)
		return broker.Message{}, false
	}
	return broker.Message{Topic: wire.AckTopic(device), Payload: payload, AtMostOnce: !s.opts.AcksAtLeastOnce}, true
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
