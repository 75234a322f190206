package lease

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Run renews, balances and watches ownership every Options.Renew until
// ctx ends (every partition is then Lost with ReasonStopped and left to
// expire), Stop is called (it returns nil; Stop hands over), or another
// hub takes this hub's id (ErrDuplicateHub, every partition Lost). After
// a tick in which the bucket failed, the next comes after a backoff that
// doubles up to TTL while nothing is owned, and stays at Renew while
// something is.
func (m *Manager) Run(ctx context.Context) error {
	m.runMu.Lock()
	defer m.runMu.Unlock()
	select {
	case <-m.stop:
		return ErrStopped
	default:
	}
	wait := time.Duration(0)
	for {
		select {
		case <-ctx.Done():
			m.loseAll(ReasonStopped)
			return ctx.Err()
		case <-m.stop:
			return nil
		case <-time.After(wait):
		}
		healthy, err := m.tick(ctx)
		if err != nil {
			m.loseAll(ReasonDuplicate)
			return err
		}
		switch {
		case healthy || m.ownedCount() > 0:
			wait = m.opts.Renew
		default:
			wait = min(max(2*wait, m.opts.Renew), m.opts.TTL)
		}
	}
}

func (m *Manager) ownedCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.owned)
}

// tick is one round: check the clock and deadlines, renew, heartbeat,
// then balance if the bucket answered. healthy is false when any bucket
// call failed.
func (m *Manager) tick(ctx context.Context) (healthy bool, err error) {
	tctx, cancel := context.WithTimeout(ctx, m.opts.Renew)
	defer cancel()
	m.expire()
	renewed := m.renew(tctx)
	if err := m.heartbeat(tctx); err != nil {
		if errors.Is(err, ErrDuplicateHub) {
			return false, err
		}
		return false, nil
	}
	if !renewed {
		return false, nil
	}
	return m.balance(tctx), nil
}

// expire ends every ownership whose deadline passed, or all of them on a
// clock fault.
func (m *Manager) expire() {
	m.mu.Lock()
	now := m.nowLocked()
	fault := m.clockFault
	m.clockFault = false
	var gone []int
	for p, h := range m.owned {
		if fault || !now.Before(h.validUntil) {
			gone = append(gone, p)
		}
	}
	m.mu.Unlock()
	reason := ReasonExpired
	if fault {
		reason = ReasonClock
		m.opts.Logger.Error("lease: the clock moved backwards; giving up every partition", "hub", m.opts.HubID)
	}
	m.loseSome(gone, reason)
}

// heartbeat renews this hub's heartbeat key, recreating it if it expired
// (the hub was paused or cut off longer than TTL).
func (m *Manager) heartbeat(ctx context.Context) error {
	key := hubKey(m.opts.HubID)
	val := record{Hub: m.opts.HubID, Instance: m.instance, URL: m.opts.URL}.encode()
	m.mu.Lock()
	rev := m.hbRevision
	m.mu.Unlock()
	nrev, err := m.kv.Update(ctx, key, val, rev)
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		e, gerr := m.kv.Get(ctx, key)
		switch {
		case gerr == nil:
			if r, _ := decodeRecord(e.Value()); r.Instance != m.instance {
				return fmt.Errorf("%w: hub %q (instance %s) took over this hub's heartbeat in bucket %s while this one (instance %s) was not renewing it",
					ErrDuplicateHub, m.opts.HubID, r.Instance, m.opts.Bucket, m.instance)
			}
			nrev, err = m.kv.Update(ctx, key, val, e.Revision())
		case errors.Is(gerr, jetstream.ErrKeyDeleted) || errors.Is(gerr, jetstream.ErrKeyNotFound):
			nrev, err = m.kv.Create(ctx, key, val)
		default:
			err = gerr
		}
	}
	if err != nil {
		m.met.kvErrors.Inc()
		m.opts.Logger.Warn("lease: heartbeat", "hub", m.opts.HubID, "err", err)
		return err
	}
	m.mu.Lock()
	m.hbRevision = nrev
	m.mu.Unlock()
	return nil
}

// renew renews every owned lease; a changed lease is lost at once, any
// other failure leaves the lease to its deadline. It stops at the first
// such failure (the bucket is likely unavailable) and reports false.
func (m *Manager) renew(ctx context.Context) bool {
	ps := m.ownedSorted()
	for _, p := range ps {
		m.mu.Lock()
		h := m.owned[p]
		m.mu.Unlock()
		if h == nil {
			continue
		}
		send := m.opts.Clock.Now()
		val := record{Hub: m.opts.HubID, Instance: m.instance, Epoch: h.epoch}.encode()
		rev, err := m.kv.Update(ctx, leaseKey(p), val, h.revision)
		switch {
		case err == nil:
			m.mu.Lock()
			if m.owned[p] == h {
				h.revision = rev
				// Only ever extend from a send time on a clock that did
				// not move backwards since.
				if !m.clockFault && send.Add(m.validity).After(h.validUntil) {
					h.validUntil = send.Add(m.validity)
				}
			}
			m.mu.Unlock()
		case errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyNotFound):
			if m.adopt(ctx, p, h) {
				continue
			}
			m.met.renewFailures.Inc()
			m.lose(p, ReasonTaken)
		default:
			m.met.renewFailures.Inc()
			m.met.kvErrors.Inc()
			m.opts.Logger.Warn("lease: renew", "hub", m.opts.HubID, "partition", p, "err", err)
			return false
		}
	}
	return true
}

// adopt handles a renewal whose previous write's reply was lost: if the
// lease still holds this run's own record of h's epoch, nobody else wrote
// it since, so the next renewal continues from its revision (the
// deadline is not extended). It reports whether it adopted.
func (m *Manager) adopt(ctx context.Context, p int, h *held) bool {
	e, err := m.kv.Get(ctx, leaseKey(p))
	if err != nil {
		return false
	}
	r, err := decodeRecord(e.Value())
	if err != nil || r.Instance != m.instance {
		return false
	}
	epoch := r.Epoch
	if epoch == 0 {
		epoch = e.Revision()
	}
	if epoch != h.epoch {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.owned[p] != h {
		return false
	}
	h.revision = e.Revision()
	return true
}

// lose ends the ownership of p (if held) and tells the owner; it returns
// what was held so the caller can free the lease (freeLeases).
func (m *Manager) lose(p int, reason Reason) *held {
	m.mu.Lock()
	h := m.owned[p]
	delete(m.owned, p)
	m.met.owned.Set(float64(len(m.owned)))
	m.mu.Unlock()
	if h == nil {
		return nil
	}
	m.opts.Logger.Warn("lease: lost partition", "hub", m.opts.HubID, "partition", p, "epoch", h.epoch, "reason", string(reason))
	if cb := m.opts.Callbacks.Lost; cb != nil {
		cb(p, h.epoch, reason)
	}
	return h
}

// freeLeases deletes leases this hub gave up if they are still the
// revision it wrote, so they free before their TTL. It runs after every
// Lost callback, within one Renew, and stops at the first failure (the
// bucket is likely unavailable; the leases expire on their own).
func (m *Manager) freeLeases(lost map[int]*held) {
	if len(lost) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.opts.Renew)
	defer cancel()
	ps := make([]int, 0, len(lost))
	for p := range lost {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	for _, p := range ps {
		err := m.kv.Delete(ctx, leaseKey(p), jetstream.LastRevision(lost[p].revision))
		if err != nil && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return
		}
	}
}

// ownedSorted lists the partitions owned now, ascending.
func (m *Manager) ownedSorted() []int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Sorted(maps.Keys(m.owned))
}

// loseAll ends every ownership with reason, then frees the leases.
func (m *Manager) loseAll(reason Reason) {
	ps := m.ownedSorted()
	m.loseSome(ps, reason)
}

// loseSome ends the ownership of ps with reason, then frees the leases.
func (m *Manager) loseSome(ps []int, reason Reason) {
	slices.Sort(ps)
	lost := map[int]*held{}
	for _, p := range ps {
		if h := m.lose(p, reason); h != nil {
			lost[p] = h
		}
	}
	m.freeLeases(lost)
}

// balance moves ownership toward the assignment over the live hubs:
// releases what moved away, acquires free partitions assigned here, and
// free ones nobody took within Grace. It reports false when a bucket
// call failed.
func (m *Manager) balance(ctx context.Context) bool {
	keys, readyAt, ready := m.view.snapshot()
	if !ready {
		return true
	}
	now := m.opts.Clock.Now()
	mem := m.members(keys, now)
	target := Assign(mem, m.opts.Partitions)
	ok := true
	for p := range m.opts.Partitions {
		e, known := keys[leaseKey(p)]
		_, mine := m.Owns(p)
		if mine {
			if target[p] != m.opts.HubID {
				ok = m.release(ctx, p) && ok
			}
			continue
		}
		free := !known || !e.live || now.Sub(e.seen) > m.opts.TTL+m.opts.Renew
		if known && e.live && e.rec.Hub == m.opts.HubID && e.rec.Instance != m.instance {
			// A dead run of this hub id (announce proved it dead): free
			// its lease now rather than after its TTL.
			if err := m.kv.Delete(ctx, leaseKey(p), jetstream.LastRevision(e.revision)); err == nil {
				free = true
			}
		}
		if !free {
			delete(m.freeSince, p)
			continue
		}
		since, seen := m.freeSince[p]
		if !seen {
			since = now
			if !known {
				since = readyAt
			}
			m.freeSince[p] = since
		}
		if target[p] == m.opts.HubID || now.Sub(since) >= m.opts.Grace {
			ok = m.acquire(ctx, p, e, known) && ok
		}
	}
	return ok
}

// acquire tries to create partition p's lease; losing the race to
// another hub is not an error.
func (m *Manager) acquire(ctx context.Context, p int, prev seenEntry, known bool) bool {
	send := m.opts.Clock.Now()
	val := record{Hub: m.opts.HubID, Instance: m.instance}.encode()
	rev, err := m.kv.Create(ctx, leaseKey(p), val)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return true
	}
	if err != nil {
		m.met.kvErrors.Inc()
		m.opts.Logger.Warn("lease: acquire", "hub", m.opts.HubID, "partition", p, "err", err)
		return false
	}
	h := &held{epoch: rev, revision: rev, validUntil: send.Add(m.validity)}
	m.mu.Lock()
	m.owned[p] = h
	delete(m.freeSince, p)
	m.met.owned.Set(float64(len(m.owned)))
	m.mu.Unlock()
	if known && !prev.created.IsZero() {
		if e, err := m.kv.Get(ctx, leaseKey(p)); err == nil && e.Revision() == rev {
			m.met.takeover.Observe(e.Created().Sub(prev.created).Seconds())
		}
	}
	m.opts.Logger.Info("lease: acquired partition", "hub", m.opts.HubID, "partition", p, "epoch", rev)
	if cb := m.opts.Callbacks.Acquired; cb != nil {
		cb(p, rev)
	}
	return true
}

// release hands partition p over cleanly: Handoff, then delete the lease
// (compare-and-set, so a lease already taken is left alone).
func (m *Manager) release(ctx context.Context, p int) bool {
	m.mu.Lock()
	h := m.owned[p]
	m.mu.Unlock()
	if h == nil {
		return true
	}
	if cb := m.opts.Callbacks.Handoff; cb != nil {
		cb(p, h.epoch)
	}
	m.mu.Lock()
	delete(m.owned, p)
	m.met.owned.Set(float64(len(m.owned)))
	m.mu.Unlock()
	m.met.rebalances.Inc()
	m.opts.Logger.Info("lease: released partition", "hub", m.opts.HubID, "partition", p, "epoch", h.epoch)
	if err := m.kv.Delete(ctx, leaseKey(p), jetstream.LastRevision(h.revision)); err != nil && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		m.met.kvErrors.Inc()
		m.opts.Logger.Warn("lease: delete released lease (it expires after TTL)", "partition", p, "err", err)
		return false
	}
	return true
}

// Stop ends Run, hands every partition over (Handoff, then its lease is
// deleted) and withdraws this hub's heartbeat, so the other hubs take its
// partitions without waiting for the TTL. It waits for Run to return or
// ctx to end.
func (m *Manager) Stop(ctx context.Context) error {
	m.stopOnce.Do(func() { close(m.stop) })
	locked := make(chan struct{})
	go func() { m.runMu.Lock(); close(locked) }()
	select {
	case <-locked:
		defer m.runMu.Unlock()
	case <-ctx.Done():
		return fmt.Errorf("lease: stop: Run did not return: %w", ctx.Err())
	}
	defer m.watchCancel()
	ps := m.ownedSorted()
	var errs []error
	for _, p := range ps {
		if _, ok := m.Owns(p); !ok {
			m.loseSome([]int{p}, ReasonExpired)
			continue
		}
		if !m.release(ctx, p) {
			errs = append(errs, fmt.Errorf("lease: partition %d: lease not deleted, it expires after %v", p, m.opts.TTL))
		}
	}
	m.mu.Lock()
	rev := m.hbRevision
	m.mu.Unlock()
	if err := m.kv.Delete(ctx, hubKey(m.opts.HubID), jetstream.LastRevision(rev)); err != nil {
		errs = append(errs, fmt.Errorf("lease: withdraw heartbeat: %w", err))
	}
	return errors.Join(errs...)
}
