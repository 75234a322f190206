package rules

import "sync"

// Broadcast hands alert revisions to live subscribers (the hub's
// /v1/stream) without ever waiting for one: a subscriber whose buffer is
// full is dropped and its channel closed. Use its Publish as
// Options.OnAlert.
type Broadcast struct {
	mu   sync.Mutex
	subs map[*AlertSubscription]struct{}
}

// AlertSubscription receives alert revisions until it is closed or
// dropped.
type AlertSubscription struct {
	c       chan Alert
	owner   *Broadcast
	dropped bool
	closed  bool
}

// Subscribe returns a subscription buffering up to buffer alerts
// (minimum 1).
func (b *Broadcast) Subscribe(buffer int) *AlertSubscription {
	s := &AlertSubscription{c: make(chan Alert, max(buffer, 1)), owner: b}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.subs == nil {
		b.subs = map[*AlertSubscription]struct{}{}
	}
	b.subs[s] = struct{}{}
	return s
}

// Publish sends alerts to every subscriber, dropping those that are full.
func (b *Broadcast) Publish(alerts []Alert) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for s := range b.subs {
		for _, a := range alerts {
			select {
			case s.c <- a:
				continue
			default:
			}
			s.dropped = true
			b.remove(s)
			break
		}
	}
}

func (b *Broadcast) remove(s *AlertSubscription) {
	if s.closed {
		return
	}
	s.closed = true
	close(s.c)
	delete(b.subs, s)
}

// Alerts is the subscription's channel; it is closed when the
// subscription is closed or dropped.
func (s *AlertSubscription) Alerts() <-chan Alert { return s.c }

// Dropped reports whether the subscription was dropped for falling behind.
func (s *AlertSubscription) Dropped() bool {
	s.owner.mu.Lock()
	defer s.owner.mu.Unlock()
	return s.dropped
}

// Close ends the subscription; it is safe to call more than once.
func (s *AlertSubscription) Close() {
	s.owner.mu.Lock()
	defer s.owner.mu.Unlock()
	s.owner.remove(s)
}
