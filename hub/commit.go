package hub

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/prometheus/client_golang/prometheus"

	"edgeflow/hub/batchview"
	"edgeflow/hub/eventtime"
	"edgeflow/hub/hublog"
	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// pending is one message on its way through the pipeline. A decode worker
// fills the first block; the committer decides the verdict and the entry.
// After the committer hands a pending on, it is read-only (the applier may
// still release its view).
type pending struct {
	kind         hublog.Kind
	device       string // from the topic
	serverTimeNs int64
	payload      []byte // as received
	logPart      int    // cluster mode: the stream partition it was read from
	logSeq       uint64 // and its sequence there (0: not from a stream)
	logGen       uint64 // the partition's ownership generation its reader ran under (own.go)
	// stale: the partition's ownership moved on since its reader handed
	// the batch over; it is neither logged, acknowledged nor applied.
	stale bool
	// barrier: not a message; it reaches the applier after everything
	// its worker handed over before it (own.go), and is never logged.
	barrier bool
	// own is a KindOwn entry's decoded record; ownKVs the dedup and
	// position keys the committer writes with it.
	own         *ownRecord
	ownKVs      []kv
	view        *batchview.View
	stream      wire.StreamID
	first, last uint64
	rangeAcks   bool              // the agent takes one ack for a run of batches
	times       eventtime.Buckets // its events' event-time index buckets
	// retryAfterNs, when set, is the RETRY_LATER ack's retry_after_ns
	// (a device at its bound of streams); else the rate limiter says.
	retryAfterNs int64

	rej      *batchview.Rejection // set: acked REJECTED, not logged
	dup      bool                 // set: acked DUPLICATE, not logged
	accepted bool                 // set: logged as entry
	entry    hublog.Entry
	// refused are the batch's events the hub refuses one by one, as the
	// ack tells them (the committer fills it: the view may be released
	// before the ack is sent).
	refused []*wirepb.Gap
	// applied, when set (an attribute write waiting for its answer),
	// takes the applier's result once the entry is applied.
	applied chan error
}

// committer owns the dedup state and the log's write position. It groups
// what the decode workers send, writes each group as one transaction (or
// several, if Badger says it is too big) and one Sync, and only then passes
// the group on to the ack publisher and the applier.
type committer struct {
	in        chan *pending
	toAck     chan []*pending
	toApply   chan []*pending
	st        *hublog.Store
	streams   map[hublog.StreamKey]*hublog.DedupState
	nextSeq   uint64
	estimator ClockEstimator
	opts      *Options
	m         *metrics
	committed atomic.Uint64 // position of the last durable entry
	lag       lagBudget     // payload committed and not yet applied
	// lastEnd is when the previous group commit ended (GroupCommitWait
	// counts from it); waitTimer is reused from group to group.
	lastEnd   time.Time
	waitTimer *time.Timer
	cap       streamCap // streams per device and their expiry (streamcap.go)
	// gens, with partition leases, is each partition's ownership
	// generation (own.go): a stream batch read under another generation
	// is stale.
	gens []atomic.Uint64
	// posGauge, in cluster mode, shows each partition's committed position;
	// posGauges holds its children by partition, made on first use so the
	// commit path does not format and look up a label per batch.
	posGauge  *prometheus.GaugeVec
	posGauges []prometheus.Gauge
}

// applyLagBytes bounds the payload bytes committed (and acknowledged) but
// not yet applied. Within it the committer goes on while the applier is
// busy; beyond it the committer waits. At 10,000 devices the applier spent
// 250 – 310 ms encoding each checkpoint's state, and with room for only 4
// groups every ack in the hub waited as long, once a minute. Each byte of
// a queued batch also holds its parsed view (a few times its size).
const applyLagBytes = 16 << 20

// applyQueueGroups is the apply queue's length in groups: enough for a
// second of groups at 10,000 one-event batches a second, so that the byte
// budget, not the count, bounds the lag.
const applyQueueGroups = 4096

// lagBudget counts bytes handed to the applier and not yet released.
type lagBudget struct {
	// limit replaces applyLagBytes when set (the memory budget's apply lag).
	limit int64
	mu    sync.Mutex
	cond  sync.Cond
	used  int64
}

// acquire waits until n more bytes fit within the limit (applyLagBytes
// unless the memory budget set one); an empty
// budget takes any n, so a group larger than the budget still passes.
func (b *lagBudget) acquire(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cond.L == nil {
		b.cond.L = &b.mu
	}
	limit := b.limit
	if limit <= 0 {
		limit = applyLagBytes
	}
	for b.used > 0 && b.used+n > limit {
		b.cond.Wait()
	}
	b.used += n
}

// release returns n bytes, once their group is applied.
func (b *lagBudget) release(n int64) {
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
	b.cond.Broadcast()
}

// groupBytes is the payload size of a group, as the lag budget counts it.
func groupBytes(g []*pending) int64 {
	var n int64
	for _, p := range g {
		n += int64(len(p.payload))
	}
	return n
}

// run commits groups until in is closed and drained, then closes its
// outputs. It returns the first store error: the hub must stop, as it can
// no longer make batches durable.
func (c *committer) run() (err error) {
	defer close(c.toApply)
	defer close(c.toAck)
	defer func() {
		if r := recover(); r != nil {
			c.m.panics.Inc()
			err = fmt.Errorf("committer panic: %v", r)
		}
	}()
	for {
		group, more := c.collect()
		if len(group) > 0 {
			group = c.withRetirements(group)
			if err := c.commit(group); err != nil {
				c.drainAfterFailure()
				return err
			}
			c.toAck <- group
			c.lag.acquire(groupBytes(group))
			c.toApply <- group
		}
		if !more {
			return nil
		}
	}
}

// drainAfterFailure discards what is still queued so the workers can stop.
func (c *committer) drainAfterFailure() {
	for range c.in {
	}
}

// collect waits for one pending and takes whatever else is queued, up to
// the group bounds; until GroupCommitWait has passed since the previous
// commit ended, it also waits for more. more is false once in is closed.
func (c *committer) collect() (group []*pending, more bool) {
	p, ok := <-c.in
	if !ok {
		return nil, false
	}
	group = append(make([]*pending, 0, 16), p)
	size := len(p.payload)
	var wait <-chan time.Time
	if d := time.Until(c.lastEnd.Add(c.opts.GroupCommitWait)); d > 0 {
		if c.waitTimer == nil {
			c.waitTimer = time.NewTimer(d)
		} else {
			c.waitTimer.Reset(d)
		}
		defer c.waitTimer.Stop()
		wait = c.waitTimer.C
	}
	for len(group) < c.opts.MaxGroupBatches && size < c.opts.MaxGroupBytes {
		var p *pending
		if wait == nil {
			select {
			case p, ok = <-c.in:
			default:
				return group, true
			}
		} else {
			select {
			case p, ok = <-c.in:
			case <-wait:
				wait = nil
				continue
			}
		}
		if !ok {
			return group, false
		}
		group = append(group, p)
		size += len(p.payload)
	}
	return group, true
}

// commit classifies and writes one group, then syncs.
func (c *committer) commit(group []*pending) error {
	start := time.Now()
	if c.gens != nil {
		for _, p := range group {
			if p.logSeq != 0 && c.gens[p.logPart].Load() != p.logGen {
				p.stale = true
			}
		}
	}
	txn := c.st.DB.NewTransaction(true)
	defer func() { txn.Discard() }()
	write := func(kvs []kv, what func() string) error {
		if err := setAll(txn, kvs); errors.Is(err, badger.ErrTxnTooBig) {
			if err := txn.Commit(); err != nil {
				return fmt.Errorf("commit log group: %w", err)
			}
			txn = c.st.DB.NewTransaction(true)
			if err := setAll(txn, kvs); err != nil {
				return fmt.Errorf("%s alone: %w", what(), err)
			}
		} else if err != nil {
			return fmt.Errorf("%s: %w", what(), err)
		}
		return nil
	}
	logged, err := c.eachEntry(group, func(p *pending, kvs []kv) error {
		return write(kvs, func() string { return fmt.Sprintf("log entry %d", p.entry.Seq) })
	})
	// Cluster mode: each partition's position goes in the same transaction
	// (the last one, if Badger split the group).
	pos := c.positionKVs(group)
	if err == nil && len(pos) > 0 {
		err = write(pos, func() string { return "stream positions" })
	}
	if err != nil || logged+len(pos) == 0 {
		return err
	}
	if err := txn.Commit(); err != nil {
		return fmt.Errorf("commit log group: %w", err)
	}
	if err := c.st.Flush(); err != nil {
		return fmt.Errorf("sync log: %w", err)
	}
	c.durable(start, logged)
	c.showPositions(group)
	return nil
}

// eachEntry decides the fate of each pending of group that is not already
// rejected and passes each one to be logged, with its keys and values, to
// write; it returns how many were logged, or write's first error.
func (c *committer) eachEntry(group []*pending, write func(p *pending, kvs []kv) error) (logged int, err error) {
	for _, p := range group {
		if p.rej != nil || p.stale || p.barrier {
			continue
		}
		key, ok := c.classify(p)
		if !ok {
			continue
		}
		if err := write(p, c.entryKVs(p, key)); err != nil {
			return logged, err
		}
		logged++
	}
	return logged, nil
}

// durable records that a group of logged entries, committed since start,
// is durable: the log position the acks and the applier may go up to,
// the group commit wait's reference point, and the commit's metrics.
func (c *committer) durable(start time.Time, logged int) {
	c.committed.Store(c.nextSeq - 1)
	c.lastEnd = time.Now()
	c.m.commitSeconds.Observe(time.Since(start).Seconds())
	c.m.groupBatches.Observe(float64(logged))
}

// kv is one key/value to set, or a key to delete (del).
type kv struct {
	k, v []byte
	del  bool
}

// setAll sets (or deletes) every kv in txn.
func setAll(txn *badger.Txn, kvs []kv) error {
	for _, e := range kvs {
		var err error
		if e.del {
			err = txn.Delete(e.k)
		} else {
			err = txn.Set(e.k, e.v)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// entryKVs assigns p its log position and returns its entry and, for a
// batch, its stream's applied ranges as they are after p and its
// event-time index keys.
func (c *committer) entryKVs(p *pending, key hublog.StreamKey) []kv {
	p.entry.Seq = c.nextSeq
	c.nextSeq++
	p.accepted = true
	if p.kind == hublog.KindRetire {
		return retireKVs(p)
	}
	if p.kind == hublog.KindOwn {
		return append([]kv{{k: hublog.WALKey(p.entry.Seq, p.serverTimeNs), v: p.entry.Encode()}}, p.ownKVs...)
	}
	out := make([]kv, 1, 2+eventtime.MaxKeys)
	out[0] = kv{k: hublog.WALKey(p.entry.Seq, p.serverTimeNs), v: p.entry.Encode()}
	if p.kind == hublog.KindBatch {
		out = append(out, kv{k: hublog.RangesKey(key.Device, key.ID), v: hublog.EncodeDedup(c.streams[key])})
		var idx [eventtime.MaxKeys]eventtime.KV
		for _, x := range eventtime.AppendKVs(idx[:0], &p.entry, p.view, &p.times) {
			out = append(out, kv{k: x.Key, v: x.Value})
		}
	}
	return out
}

// classify decides a pending's fate against the stream's applied ranges
// and, when it is to be logged, fills its entry. ok is false for
// duplicates and rejections.
func (c *committer) classify(p *pending) (key hublog.StreamKey, ok bool) {
	p.entry = hublog.Entry{Kind: p.kind, ServerTimeNs: p.serverTimeNs, Device: p.device, Payload: p.payload}
	if p.kind == hublog.KindRetire {
		p.entry.Stream = p.stream
		return hublog.StreamKey{Device: p.device, ID: p.stream}, true
	}
	if p.kind == hublog.KindOwn {
		p.ownKVs = c.applyOwn(p.own)
		return key, true
	}
	if p.kind != hublog.KindBatch {
		return key, true
	}
	key = hublog.StreamKey{Device: p.device, ID: p.stream}
	st := c.streams[key]
	opening := st == nil
	if opening {
		if !c.admitStream(p) {
			return key, false
		}
		st = &hublog.DedupState{}
	}
	p.refused = ackRefused(p.view)
	if st.Applied.Covers(p.first, p.last) {
		p.dup = true
		return key, false
	}
	if p.first > st.Horizon && p.first-st.Horizon > c.opts.MaxSeqAhead {
		p.rej = &batchview.Rejection{Reason: batchview.ReasonSeqAhead, Detail: fmt.Sprintf("first_seq %d is more than %d beyond the stream's highest sequence %d", p.first, c.opts.MaxSeqAhead, st.Horizon)}
		return key, false
	}
	fresh := st.Applied.Missing(nil, p.first, p.last)
	if st.Applied.Len()+len(fresh) > c.opts.MaxRangesPerStream {
		p.rej = &batchview.Rejection{Reason: batchview.ReasonFragmented, Detail: fmt.Sprintf("stream already holds %d disjoint ranges (limit %d)", st.Applied.Len(), c.opts.MaxRangesPerStream)}
		return key, false
	}
	st.Applied.Add(p.first, p.last)
	st.Horizon = max(st.Horizon, p.last)
	for _, g := range p.view.Gaps {
		st.Horizon = max(st.Horizon, g.Last)
	}
	st.LastSeenNs = max(st.LastSeenNs, p.serverTimeNs)
	if opening {
		c.openStream(key, st)
	}
	c.streams[key] = st
	p.entry.Stream, p.entry.FirstSeq, p.entry.Count, p.entry.Fresh = p.stream, p.first, p.last-p.first+1, fresh
	p.entry.Refused = eventtime.FreshRefused(p.view, fresh)
	p.entry.Est = c.estimate(p)
	return key, true
}

// estimate feeds the hub's clock estimator and returns its estimate for
// the batch's device, which the entry keeps for replays.
func (c *committer) estimate(p *pending) hublog.HubEstimate {
	if c.estimator == nil {
		return hublog.HubEstimate{}
	}
	observe(c.estimator, p.device, p.view.SendTimeNs, p.serverTimeNs)
	off, unc, ok := c.estimator.Estimate(p.device)
	if !ok {
		return hublog.HubEstimate{}
	}
	return hublog.HubEstimate{OK: true, OffsetNs: int64(off), UncertaintyNs: int64(max(unc, 0))}
}

// ackRefused lists a batch's refused events as the ack names them: one
// range per run, with the fault's reason.
func ackRefused(v *batchview.View) []*wirepb.Gap {
	if len(v.Refused) == 0 {
		return nil
	}
	out := make([]*wirepb.Gap, len(v.Refused))
	for i, r := range v.Refused {
		out[i] = &wirepb.Gap{FirstSeq: v.FirstSeq + uint64(r.Lo), LastSeq: v.FirstSeq + uint64(r.Hi), Reason: r.Fault.Reason()}
	}
	return out
}
