package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// held is a lease this hub owns.
type held struct {
	epoch      uint64
	revision   uint64    // last revision written, for the next renewal
	validUntil time.Time // Clock time after which ownership has ended
}

// Manager holds this hub's leases: it renews them, balances partitions
// with the other hubs and tells its owner about every change through
// Callbacks. Open starts it, Run drives it, Stop hands everything over.
type Manager struct {
	opts     Options
	kv       jetstream.KeyValue
	instance string
	view     *view
	met      *metrics
	validity time.Duration // TTL/2: how long a renewal keeps ownership

	mu         sync.Mutex
	owned      map[int]*held
	lastNow    time.Time
	clockFault bool
	hbRevision uint64
	freeSince  map[int]time.Time // local time each partition was first seen free

	watchCancel context.CancelFunc
	stopOnce    sync.Once
	stop        chan struct{}
	runMu       sync.Mutex // held while Run's loop runs
}

// Open creates or opens the lease bucket, refuses to start with
// ErrDuplicateHub while another live hub announces opts.HubID, announces
// this hub and starts following the bucket. Call Run next.
func Open(ctx context.Context, js jetstream.JetStream, opts Options) (*Manager, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	met, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	kv, err := openBucket(ctx, js, opts)
	if err != nil {
		return nil, err
	}
	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	m := &Manager{
		opts: opts, kv: kv, instance: hex.EncodeToString(nonce[:]),
		view: newView(opts.Clock, opts.Logger, met.kvErrors.Inc), met: met, validity: opts.TTL / 2,
		owned: map[int]*held{}, freeSince: map[int]time.Time{}, stop: make(chan struct{}),
		lastNow: opts.Clock.Now(),
	}
	if err := m.announce(ctx); err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(context.Background())
	m.watchCancel = cancel
	go m.view.run(wctx, kv, opts.Renew, m.met.kvErrors.Inc)
	return m, nil
}

// openBucket opens the lease bucket, creating it if needed, and checks an
// existing one has this TTL: hubs with different TTLs could not keep the
// safety margin.
func openBucket(ctx context.Context, js jetstream.JetStream, o Options) (jetstream.KeyValue, error) {
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:         o.Bucket,
		Description:    "edgeflow: partition leases and hub heartbeats",
		History:        1,
		TTL:            o.TTL,
		LimitMarkerTTL: o.TTL,
		Replicas:       o.Replicas,
		Storage:        jetstream.FileStorage,
	})
	if errors.Is(err, jetstream.ErrBucketExists) {
		kv, err = js.KeyValue(ctx, o.Bucket)
		if err == nil {
			st, serr := kv.Status(ctx)
			if serr != nil {
				return nil, fmt.Errorf("lease: status of bucket %s: %w", o.Bucket, serr)
			}
			if st.TTL() != o.TTL || st.History() != 1 {
				return nil, fmt.Errorf("%w: %s has TTL %v and history %d, this hub wants TTL %v and history 1; give every hub the same TTL (or delete the bucket while no hub runs)",
					ErrBucketMismatch, o.Bucket, st.TTL(), st.History(), o.TTL)
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("lease: bucket %s: %w", o.Bucket, err)
	}
	return kv, nil
}

// announce creates this hub's heartbeat key. If one exists, its holder is
// live when it renews within TTL/2 plus a renewal: then ErrDuplicateHub.
// Otherwise it is a dead run of this id, and the key is taken over.
func (m *Manager) announce(ctx context.Context) error {
	val := record{Hub: m.opts.HubID, Instance: m.instance, URL: m.opts.URL}.encode()
	key := hubKey(m.opts.HubID)
	rev, err := m.kv.Create(ctx, key, val)
	if err == nil {
		m.hbRevision = rev
		return nil
	}
	if !errors.Is(err, jetstream.ErrKeyExists) {
		m.met.kvErrors.Inc()
		return fmt.Errorf("lease: announce hub %s: %w", m.opts.HubID, err)
	}
	first, err := m.kv.Get(ctx, key)
	if err != nil && !errors.Is(err, jetstream.ErrKeyDeleted) && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("lease: announce hub %s: %w", m.opts.HubID, err)
	}
	if err != nil { // gone meanwhile: try again from the start
		return m.announce(ctx)
	}
	m.opts.Logger.Info("lease: heartbeat key of this hub id exists; waiting to see whether its holder is alive",
		"hub", m.opts.HubID, "wait", m.validity+m.opts.Renew)
	deadline := time.Now().Add(m.validity + m.opts.Renew)
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(m.opts.Renew / 2):
		}
		e, err := m.kv.Get(ctx, key)
		if err == nil && e.Revision() != first.Revision() {
			other, _ := decodeRecord(e.Value())
			return fmt.Errorf("%w: hub %q (instance %s) renewed its heartbeat in bucket %s; give this hub another hub-id",
				ErrDuplicateHub, m.opts.HubID, other.Instance, m.opts.Bucket)
		}
		if errors.Is(err, jetstream.ErrKeyDeleted) || errors.Is(err, jetstream.ErrKeyNotFound) {
			break
		}
	}
	// Not renewed for longer than any live holder may go: take it over
	// with a compare-and-set, so a holder that renewed at the last
	// moment still wins.
	rev, err = m.kv.Update(ctx, key, val, first.Revision())
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		e, gerr := m.kv.Get(ctx, key)
		if gerr == nil {
			if other, _ := decodeRecord(e.Value()); other.Instance != m.instance {
				return fmt.Errorf("%w: hub %q (instance %s) holds the heartbeat in bucket %s; give this hub another hub-id",
					ErrDuplicateHub, m.opts.HubID, other.Instance, m.opts.Bucket)
			}
		}
		return m.announce(ctx)
	}
	if err != nil {
		m.met.kvErrors.Inc()
		return fmt.Errorf("lease: announce hub %s: %w", m.opts.HubID, err)
	}
	m.hbRevision = rev
	m.opts.Logger.Info("lease: took over the heartbeat of a dead run of this hub id", "hub", m.opts.HubID)
	return nil
}

// now reads the clock; a reading before the previous one is a clock fault
// that ends every ownership (recorded here, acted on by the loop).
func (m *Manager) nowLocked() time.Time {
	now := m.opts.Clock.Now()
	if now.Before(m.lastNow) {
		m.clockFault = true
		return now
	}
	m.lastNow = now
	return now
}

// Owns reports whether this hub owns partition p now, and under which
// epoch. It turns false the moment the ownership's deadline passes, even
// before the Lost callback ran.
func (m *Manager) Owns(p int) (uint64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.nowLocked()
	h := m.owned[p]
	if h == nil || m.clockFault || !now.Before(h.validUntil) {
		return 0, false
	}
	return h.epoch, true
}

// HubID is this hub's id.
func (m *Manager) HubID() string { return m.opts.HubID }

// URL is this hub's advertised API base URL (Options.URL).
func (m *Manager) URL() string { return m.opts.URL }

// Partitions is the stream's partition count (Options.Partitions).
func (m *Manager) Partitions() int { return m.opts.Partitions }

// TTL is the lease TTL (Options.TTL).
func (m *Manager) TTL() time.Duration { return m.opts.TTL }

// PartitionStatus is one partition's lease as this hub sees it.
type PartitionStatus struct {
	Partition int
	// Owner is the holder's hub id; "" when free, or when this hub has
	// not seen the lease renewed within TTL + Renew (its view of the
	// bucket may be cut off: the holder is unknown, not assumed).
	Owner string
	// Epoch is the holder's epoch (0 when free).
	Epoch uint64
	// Expires is when the server drops the lease unless it is renewed
	// (server time of the last renewal + TTL); zero when free.
	Expires time.Time
	// Mine is true when this hub owns it (Owns).
	Mine bool
	// Target is the hub the assignment gives it to.
	Target string
}

// HubStatus is one live hub as this hub sees it.
type HubStatus struct {
	ID string
	// URL is the API base URL its heartbeat advertises; "" when none.
	URL string
}

// Status is the cluster's leases as this hub sees them.
type Status struct {
	HubID   string
	Members []string
	// Hubs are the Members with what their heartbeats say, in the same
	// order.
	Hubs []HubStatus
	// Partitions has one entry per partition, in order.
	Partitions []PartitionStatus
}

// Status reports every partition's owner, epoch, expiry and target from
// this hub's view of the bucket, and every live hub's advertised URL.
func (m *Manager) Status() Status { return m.status(true) }

// Leases is Status without the targets (every Target is ""): what a
// caller reading it often (a query's view of the cluster) needs, without
// computing the assignment.
func (m *Manager) Leases() Status { return m.status(false) }

func (m *Manager) status(withTarget bool) Status {
	keys, _, _ := m.view.snapshot()
	now := m.opts.Clock.Now()
	mem := m.members(keys, now)
	target := make([]string, m.opts.Partitions)
	if withTarget {
		target = Assign(mem, m.opts.Partitions)
	}
	st := Status{HubID: m.opts.HubID, Members: mem, Hubs: make([]HubStatus, len(mem)), Partitions: make([]PartitionStatus, m.opts.Partitions)}
	for i, id := range mem {
		st.Hubs[i].ID = id
		if id == m.opts.HubID {
			st.Hubs[i].URL = m.opts.URL
		} else if e, ok := keys[hubKey(id)]; ok && e.live {
			st.Hubs[i].URL = e.rec.URL
		}
	}
	for p := range st.Partitions {
		ps := PartitionStatus{Partition: p, Target: target[p]}
		if e, ok := keys[leaseKey(p)]; ok && e.live && now.Sub(e.seen) <= m.opts.TTL+m.opts.Renew {
			ps.Owner, ps.Epoch, ps.Expires = e.rec.Hub, e.epoch(), e.created.Add(m.opts.TTL)
		}
		if epoch, ok := m.Owns(p); ok {
			ps.Owner, ps.Epoch, ps.Mine = m.opts.HubID, epoch, true
		}
		st.Partitions[p] = ps
	}
	return st
}

// members are the live hubs in keys, always including this one.
func (m *Manager) members(keys map[string]seenEntry, now time.Time) []string {
	mem := members(keys, now, m.opts.TTL+m.opts.Renew)
	if !slices.Contains(mem, m.opts.HubID) {
		mem = append(mem, m.opts.HubID)
	}
	slices.Sort(mem)
	return mem
}
