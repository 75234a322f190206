package hub

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/prometheus/client_golang/prometheus"

	"edgeflow/hub/batchview"
	"edgeflow/hub/clockest"
	"edgeflow/hub/eventtime"
	"edgeflow/hub/hublog"
	"edgeflow/hub/natslog"
	"edgeflow/hub/ranges"
)

// backfillChunk is how many stream messages one backfill transaction
// covers at most (its entries, the ranges they list and the plan's
// progress), and backfillChunkBytes how many payload bytes: what the
// backfill holds in memory besides the reader's buffer.
const (
	backfillChunk      = 512
	backfillChunkBytes = 4 << 20
)

// clusterBackfill fills, after a state snapshot restore, the local log's
// backfill key space (hublog.PrefixBackfill) with the batches the
// snapshot's state holds, read back from the stream: the event listing
// reads them, recovery and the applier never do (docs/CLUSTER.md,
// "Backfill").
type clusterBackfill struct {
	running          atomic.Bool
	incompleteBefore atomic.Int64 // ns; 0: nothing known missing
	m                *backfillMetrics

	chunk     int // messages per transaction (backfillChunk unless a test sets it)
	stopAfter int // tests: stop after this many transactions, as if the hub died
}

// backfillMetrics are the backfill's series.
type backfillMetrics struct {
	running   prometheus.Gauge
	remaining prometheus.Gauge
	entries   prometheus.Counter
}

// newBackfillMetrics creates the backfill's series and registers them.
func newBackfillMetrics(reg prometheus.Registerer) (*backfillMetrics, error) {
	m := &backfillMetrics{
		running: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "edgeflow", Subsystem: "hub", Name: "backfilling",
			Help: "Cluster mode: 1 while the hub backfills its local log from the stream after a state snapshot restore (/v1/events may be incomplete meanwhile)."}),
		remaining: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "edgeflow", Subsystem: "hub", Name: "backfill_remaining",
			Help: "Cluster mode: stream sequences the backfill has still to read up to the restored snapshot's positions (a sequence distance, not a message count)."}),
		entries: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "edgeflow", Subsystem: "hub", Name: "backfill_entries_total",
			Help: "Cluster mode: log entries backfilled from the stream after a state snapshot restore."}),
	}
	for _, c := range []prometheus.Collector{m.running, m.remaining, m.entries} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// setBackfillPlan writes, in the transaction that completes a snapshot
// restore, the backfill's plan (the snapshot's positions) and each
// stream's applied ranges as the snapshot holds them: the events the
// backfill may list, so none applied after the snapshot is listed twice.
func (s *Server) setBackfillPlan(txn *badger.Txn, positions map[int]uint64) error {
	if len(positions) == 0 {
		return nil
	}
	for k, st := range s.reg.DedupStates() {
		if err := txn.Set(hublog.BackfillLimitKey(k.Device, k.ID), hublog.EncodeRangeSet(&st.Applied)); err != nil {
			return err
		}
	}
	return hublog.SetBackfillPlan(txn, &hublog.BackfillPlan{Stream: s.opts.NATS.Log.Stream, Positions: positions})
}

// startBackfill loads the backfill's plan and, unless it is finished or
// there is none, runs it in the background until it finishes or ctx
// ends (a restart resumes it).
func (s *Server) startBackfill(ctx context.Context, l *natslog.Log) error {
	bf := &s.cl.bf
	plan, err := s.st.LoadBackfillPlan()
	if err != nil || plan == nil {
		return err
	}
	if plan.Stream != s.opts.NATS.Log.Stream {
		s.log.Error("cluster mode: the data directory's backfill plan is of another stream; not backfilling",
			"plan_stream", plan.Stream, "stream", s.opts.NATS.Log.Stream)
		return nil
	}
	bf.incompleteBefore.Store(plan.IncompleteBeforeNs)
	if plan.Finished {
		return s.dropBackfillRanges() // left by a stop right after the last transaction
	}
	bf.running.Store(true)
	bf.m.running.Set(1)
	bf.m.remaining.Set(float64(plan.End() - min(plan.Through, plan.End())))
	s.cl.wg.Add(1)
	go func() {
		defer s.cl.wg.Done()
		s.runBackfill(ctx, l, plan)
	}()
	return nil
}

// errBackfillStopped is a test's stop after stopAfter transactions.
var errBackfillStopped = errors.New("backfill stopped (test)")

// runBackfill runs passes of the backfill, retrying with backoff after a
// failure, until one finishes or ctx ends.
func (s *Server) runBackfill(ctx context.Context, l *natslog.Log, plan *hublog.BackfillPlan) {
	bf := &s.cl.bf
	start := time.Now()
	for delay := 100 * time.Millisecond; ; delay = min(2*delay, 5*time.Second) {
		err := s.backfillPass(ctx, l, plan)
		if err == nil {
			break
		}
		if ctx.Err() != nil || errors.Is(err, errBackfillStopped) {
			return
		}
		s.rejLog.log(s.log, "backfill", "", "cluster mode: backfilling the local log from the stream failed; retrying", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
	}
	bf.running.Store(false)
	bf.m.running.Set(0)
	bf.m.remaining.Set(0)
	if err := s.dropBackfillRanges(); err != nil {
		s.log.Error("cluster mode: deleting the backfill's per-stream ranges; the next start tries again", "err", err)
	}
	attrs := []any{"entries", plan.Entries, "through", plan.Through, "took", time.Since(start).Round(time.Millisecond)}
	if plan.IncompleteBeforeNs != 0 {
		attrs = append(attrs, "incomplete_before", time.Unix(0, plan.IncompleteBeforeNs).UTC().Format(time.RFC3339Nano))
	}
	s.log.Info("cluster mode: backfilled the local log from the stream up to the restored snapshot", attrs...)
}

// backfillPass reads the stream from after plan.Through up to the plan's
// positions and writes, every chunk messages, one transaction: the
// entries, the ranges they list and the plan with its new progress. It
// checks first what retention dropped of what is still to read.
func (s *Server) backfillPass(ctx context.Context, l *natslog.Log, plan *hublog.BackfillPlan) error {
	bf := &s.cl.bf
	held, err := l.Retained(ctx)
	if err != nil {
		return err
	}
	if next := plan.Through + 1; next <= plan.End() && (held.FirstSeq > next || held.Messages == 0) {
		// Messages from next on were dropped before this pass read them.
		at := held.FirstTime.UnixNano()
		if held.Messages == 0 || held.FirstTime.IsZero() {
			at = s.opts.Now().UnixNano()
		}
		plan.IncompleteBeforeNs = max(plan.IncompleteBeforeNs, at)
		bf.incompleteBefore.Store(plan.IncompleteBeforeNs)
		s.log.Error("cluster mode: the stream no longer holds part of what the restored snapshot covers; /v1/events lacks those batches",
			"backfilled_through", plan.Through, "stream_first_seq", held.FirstSeq,
			"incomplete_before", time.Unix(0, plan.IncompleteBeforeNs).UTC().Format(time.RFC3339Nano))
	}
	r, err := l.ReaderAll(ctx, plan.Through+1, plan.Positions)
	if err != nil {
		return err
	}
	defer r.Close()
	w := newBackfillWriter(s, plan)
	chunk := bf.chunk
	if chunk <= 0 {
		chunk = backfillChunk
	}
	for n, txns := 0, 0; ; {
		m, err := r.Next(ctx)
		eof := errors.Is(err, io.EOF)
		switch {
		case eof:
		case errors.Is(err, natslog.ErrBadSubject):
			w.through = max(w.through, m.Seq) // the live reader skipped it too
		case err != nil:
			return err
		default:
			w.add(m)
		}
		if n++; n < chunk && w.bytes < backfillChunkBytes && !eof {
			continue
		}
		if err := w.commit(eof); err != nil {
			return err
		}
		bf.m.remaining.Set(float64(plan.End() - min(plan.Through, plan.End())))
		n = 0
		if eof {
			return nil
		}
		if txns++; bf.stopAfter > 0 && txns >= bf.stopAfter {
			return errBackfillStopped
		}
	}
}

// backfillWriter turns stream messages into backfilled entries and
// writes them in transactions with the plan's progress.
type backfillWriter struct {
	s       *Server
	plan    *hublog.BackfillPlan
	views   batchview.View
	est     ClockEstimator
	limit   map[hublog.StreamKey]*ranges.RangeSet // nil value: the snapshot has no such stream
	done    map[hublog.StreamKey]*ranges.RangeSet
	dirty   map[hublog.StreamKey]bool
	kvs     []kv
	bytes   int // payload bytes queued in kvs
	entries uint64
	through uint64
}

func newBackfillWriter(s *Server, plan *hublog.BackfillPlan) *backfillWriter {
	w := &backfillWriter{s: s, plan: plan, limit: map[hublog.StreamKey]*ranges.RangeSet{},
		done: map[hublog.StreamKey]*ranges.RangeSet{}, dirty: map[hublog.StreamKey]bool{}, through: plan.Through}
	// A fresh estimator fed in stream order, as the first reading fed the
	// hub's; it starts at the first message the backfill reads.
	if dc, err := clockest.NewDeviceClocks(clockest.DeviceClocksOptions{}); err == nil {
		w.est = dc
	}
	return w
}

// ranges loads the snapshot's and the backfill's ranges of a stream.
func (w *backfillWriter) ranges(key hublog.StreamKey) (limit, done *ranges.RangeSet, err error) {
	if lim, ok := w.limit[key]; ok {
		return lim, w.done[key], nil
	}
	err = w.s.st.DB.View(func(txn *badger.Txn) error {
		lim, ok, err := hublog.LoadRangeSet(txn, hublog.BackfillLimitKey(key.Device, key.ID))
		if err != nil || !ok {
			return err
		}
		d, _, err := hublog.LoadRangeSet(txn, hublog.BackfillDoneKey(key.Device, key.ID))
		limit, done = &lim, &d
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	w.limit[key], w.done[key] = limit, done
	return limit, done, nil
}

// add decides one message as the committer would have, against the
// ranges the snapshot holds and those already backfilled, and queues its
// entry when it lists any event. A batch that does not parse or
// validate was rejected when first read and lists nothing; one of a
// stream the snapshot does not hold (never admitted, or retired before
// the snapshot) lists nothing either.
func (w *backfillWriter) add(m natslog.Message) {
	w.through = max(w.through, m.Seq)
	if m.Kind != "" {
		return // not a batch: an attribute version lists no event
	}
	v := &w.views
	if batchview.ParseBatchFrame(v, m.Data, w.s.opts.Limits) != nil || batchview.ValidateBatch(v, m.Device) != nil || v.Len() == 0 {
		return
	}
	var key hublog.StreamKey
	key.Device = m.Device
	copy(key.ID[:], v.StreamID)
	limit, done, err := w.ranges(key)
	if err != nil || limit == nil {
		if err != nil {
			w.s.log.Error("cluster mode: backfill: reading a stream's ranges", "device", m.Device, "err", err)
		}
		return
	}
	first, last := v.FirstSeq, v.FirstSeq+uint64(v.Len())-1
	fresh := intersect(done.Missing(nil, first, last), limit.Ranges())
	if len(fresh) == 0 {
		return
	}
	for _, r := range fresh {
		done.Add(r.First, r.Last)
	}
	w.dirty[key] = true
	serverNs := m.Stored.UnixNano()
	e := hublog.Entry{Seq: hublog.BackfillSeq(m.Seq), Kind: hublog.KindBatch, ServerTimeNs: serverNs, Device: m.Device,
		Stream: key.ID, FirstSeq: first, Count: last - first + 1, Fresh: fresh, Refused: eventtime.FreshRefused(v, fresh),
		Payload: m.Data}
	if w.est != nil {
		observe(w.est, m.Device, v.SendTimeNs, serverNs)
		if off, unc, ok := w.est.Estimate(m.Device); ok {
			e.Est = hublog.HubEstimate{OK: true, OffsetNs: int64(off), UncertaintyNs: int64(max(unc, 0))}
		}
	}
	w.kvs = append(w.kvs, kv{k: hublog.BackfillKey(m.Seq, serverNs), v: e.Encode()})
	w.bytes += len(m.Data)
	for _, x := range eventtime.AppendKVs(nil, &e, v, nil) {
		w.kvs = append(w.kvs, kv{k: x.Key, v: x.Value})
	}
	w.entries++
}

// intersect returns the parts of want (ascending, disjoint) that have
// (ascending, disjoint) also holds.
func intersect(want, have []ranges.SeqRange) []ranges.SeqRange {
	var out []ranges.SeqRange
	for _, a := range want {
		for _, b := range have {
			if b.Last < a.First {
				continue
			}
			if b.First > a.Last {
				break
			}
			out = append(out, ranges.SeqRange{First: max(a.First, b.First), Last: min(a.Last, b.Last)})
		}
	}
	return out
}

// commit writes the queued entries, then the ranges they list and the
// plan's new progress (finished when last). Entries are keyed by their
// stream sequence, so a crash before the last transaction leaves entries
// the resumed pass writes again in the same place: never twice.
func (w *backfillWriter) commit(last bool) error {
	db := w.s.st.DB
	txn := db.NewTransaction(true)
	defer func() { txn.Discard() }()
	set := func(x kv) error {
		err := txn.Set(x.k, x.v)
		if errors.Is(err, badger.ErrTxnTooBig) {
			if err := txn.Commit(); err != nil {
				return err
			}
			txn = db.NewTransaction(true)
			err = txn.Set(x.k, x.v)
		}
		return err
	}
	for _, x := range w.kvs {
		if err := set(x); err != nil {
			return fmt.Errorf("backfill entries: %w", err)
		}
	}
	for key := range w.dirty {
		if err := set(kv{k: hublog.BackfillDoneKey(key.Device, key.ID), v: hublog.EncodeRangeSet(w.done[key])}); err != nil {
			return fmt.Errorf("backfill ranges: %w", err)
		}
	}
	next := *w.plan
	next.Through, next.Entries, next.Finished = w.through, w.plan.Entries+w.entries, last
	if err := hublog.SetBackfillPlan(txn, &next); err != nil {
		return fmt.Errorf("backfill plan: %w", err)
	}
	if err := txn.Commit(); err != nil {
		return fmt.Errorf("backfill commit: %w", err)
	}
	w.s.cl.bf.m.entries.Add(float64(w.entries))
	*w.plan = next
	w.kvs, w.bytes, w.entries = w.kvs[:0], 0, 0
	clear(w.dirty)
	return nil
}

// backfillState is what /v1/events says about the backfill: whether it
// runs, and before when events may be missing (0: not known to be).
func (s *Server) backfillState() (running bool, incompleteBeforeNs int64) {
	if s.cl == nil {
		return false, 0
	}
	return s.cl.bf.running.Load(), s.cl.bf.incompleteBefore.Load()
}

// retainBackfilled deletes the backfilled entries stored before cutoff
// (the log's RetentionMaxAge applies to them as to the log) with their
// event-time index keys, the index keys first as Retain does. None of
// them is needed for recovery. It returns how many it deleted.
func (s *Server) retainBackfilled(cutoff int64) (int, error) {
	deleted := 0
	for {
		var keys, idx [][]byte
		err := s.st.DB.View(func(txn *badger.Txn) error {
			it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{hublog.PrefixBackfill}, PrefetchValues: true, PrefetchSize: 16})
			defer it.Close()
			for it.Rewind(); it.Valid() && len(keys) < hublog.RetainBatch; it.Next() {
				k := it.Item().Key()
				if len(k) != 17 {
					return fmt.Errorf("%w: backfilled entry key %x", hublog.ErrCorrupt, k)
				}
				seq, t := binary.BigEndian.Uint64(k[1:]), int64(binary.BigEndian.Uint64(k[9:]))
				if t >= cutoff {
					continue // stream order is nearly, not strictly, stored-time order
				}
				keys = append(keys, it.Item().KeyCopy(nil))
				v, err := it.Item().ValueCopy(nil)
				if err != nil {
					return err
				}
				e, err := hublog.DecodeEntry(hublog.BackfillSeq(seq), v)
				if err != nil {
					continue // no index keys it can name; readers skip stale ones
				}
				view := new(batchview.View)
				if batchview.ParseBatchFrame(view, e.Payload, s.opts.Limits) != nil {
					continue
				}
				for _, x := range eventtime.AppendKVs(nil, e, view, nil) {
					idx = append(idx, x.Key)
				}
			}
			return nil
		})
		if err == nil && len(keys) > 0 {
			err = hublog.DeleteKeys(s.st.DB, idx)
		}
		if err == nil && len(keys) > 0 {
			err = hublog.DeleteKeys(s.st.DB, keys)
		}
		if err != nil || len(keys) < hublog.RetainBatch {
			return deleted + len(keys), err
		}
		deleted += len(keys)
	}
}

// dropBackfillRanges deletes the per-stream ranges of a finished
// backfill (the snapshot's and those listed), which only a running
// one reads.
func (s *Server) dropBackfillRanges() error {
	for _, prefix := range hublog.BackfillRangesPrefixes() {
		for {
			var keys [][]byte
			err := s.st.DB.View(func(txn *badger.Txn) error {
				it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
				defer it.Close()
				for it.Rewind(); it.Valid() && len(keys) < hublog.RetainBatch; it.Next() {
					keys = append(keys, it.Item().KeyCopy(nil))
				}
				return nil
			})
			if err == nil {
				err = hublog.DeleteKeys(s.st.DB, keys)
			}
			if err != nil {
				return err
			}
			if len(keys) < hublog.RetainBatch {
				break
			}
		}
	}
	return nil
}
