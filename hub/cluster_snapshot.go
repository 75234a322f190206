package hub

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"edgeflow/hub/hublog"
	"edgeflow/hub/natslog"
)

// clusterSnap is cluster mode's state snapshots in natslog.Snapshots: the
// applied state with the stream positions it covers, uploaded every
// NATSOptions.SnapshotInterval off the apply path, and restored by a hub
// started on an empty data directory (docs/CLUSTER.md).
type clusterSnap struct {
	// applied is, per partition, the last stream sequence the applier
	// applied (or decided: duplicates and rejections count too). Only the
	// applier goroutine touches it once the pipeline runs; a capture
	// copies it there, with the state, so a snapshot never claims a
	// position beyond its state.
	applied map[int]uint64

	store    atomic.Pointer[natslog.Snapshots]
	upMu     sync.Mutex // one upload at a time; guards the fields below
	gen      uint64     // the head generation the next Put names
	genKnown bool       // gen was read or assigned
	// lastPosPtr holds the positions of the last stored (or restored)
	// snapshot; set under upMu, read on the applier.
	lastPosPtr atomic.Pointer[map[int]uint64]
	lastPause  time.Duration // the last stored snapshot's capture time on the applier

	restoredGen uint64         // the generation restored at start (0: none)
	restoredPos map[int]uint64 // its positions, checked against the stream
	waiting     atomic.Pointer[string]

	failAfterCheckpoint bool // tests: a restore stops as if the hub died after writing its checkpoint
}

// snapshotMetrics count uploads and restores.
type snapshotMetrics struct {
	uploads  *prometheus.CounterVec // by result: ok, error, conflict
	bytes    prometheus.Gauge
	restores *prometheus.CounterVec // by result: latest, fallback, none, unreadable
	gaps     prometheus.Counter
}

// newSnapshotMetrics creates and registers the snapshot series.
func newSnapshotMetrics(reg prometheus.Registerer) (*snapshotMetrics, error) {
	m := &snapshotMetrics{
		uploads: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "edgeflow", Subsystem: "hub", Name: "snapshot_uploads_total",
			Help: "Cluster mode: state snapshots put into the NATS object store, by result (ok, error, conflict: another writer moved the pointer)."}, []string{"result"}),
		bytes: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "edgeflow", Subsystem: "hub", Name: "snapshot_bytes",
			Help: "Cluster mode: size of the last state snapshot stored."}),
		restores: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "edgeflow", Subsystem: "hub", Name: "snapshot_restores_total",
			Help: "Cluster mode: starts on an empty data directory, by what they restored (latest, fallback: an older generation, none: no snapshot, unreadable: none readable, unavailable: the store kept failing)."}, []string{"result"}),
		gaps: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "edgeflow", Subsystem: "hub", Name: "snapshot_restore_gaps_total",
			Help: "Cluster mode: partitions whose messages after a restored snapshot's position the stream may no longer hold (retention dropped them before the restore)."}),
	}
	for _, c := range []prometheus.Collector{m.uploads, m.bytes, m.restores, m.gaps} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// noteApplied records the stream positions of an applied group (applier
// goroutine).
func (c *cluster) noteApplied(g []*pending) {
	for _, p := range g {
		if p.logSeq != 0 && p.logSeq > c.snap.applied[p.logPart] {
			c.snap.applied[p.logPart] = p.logSeq
		}
	}
}

// snapshotStartWait is how long a hub on an empty data directory waits
// while JetStream refuses the snapshot buckets (an API error other than
// "temporarily unavailable") before it reads the stream from its start
// instead. Unreachable servers, timeouts and elections are waited out:
// the snapshot may be there.
const snapshotStartWait = 2 * time.Minute

// jsTemporarilyUnavailable is JetStream's error code for "JetStream
// system temporarily unavailable" (a cluster without a meta leader).
const jsTemporarilyUnavailable jetstream.ErrorCode = 10008

// snapOptions are the snapshot buckets' options: natslog's defaults with
// the stream's replica count, and the bucket named after the stream
// (EDGEFLOW_SNAPSHOTS for the default stream), so hubs of two streams on
// one NATS cluster keep apart; a stream name too long for that shares
// the default bucket, and the stream name inside each snapshot keeps a
// hub from restoring another stream's.
func (n *NATSOptions) snapOptions() natslog.SnapshotOptions {
	o := natslog.SnapshotOptions{Replicas: n.Log.Replicas}
	if b := n.Log.Stream + "_SNAPSHOTS"; len(b) <= 59 && n.Log.Stream != "" {
		o.Bucket = b
	}
	return o
}

// snapMaxBytes is the largest snapshot the store takes.
func (n *NATSOptions) snapMaxBytes() int64 {
	o := n.snapOptions()
	o.EnsureDefaults()
	return o.MaxBytes
}

// snapCapture is the applied state taken between two groups.
type snapCapture struct {
	stream    string
	walPos    uint64
	state     []byte
	positions map[int]uint64
	gen       uint64        // the partial store's generation
	txn       *badger.Txn   // a read of Badger at the capture: the partials the state refers to
	pause     time.Duration // the applier's time spent on the capture
}

// The state snapshot's encoding (natslog.Snapshot.State): "EFHS", a
// version byte, the stream's name (its length, at most 64, and bytes),
// the local log position the state covers, the partial
// store's generation, the state's length and bytes, the partial count,
// then each partial's key and value, every length a uvarint.
const (
	clusterSnapMagic   = "EFHS"
	clusterSnapVersion = 1
)

// encode builds the snapshot's bytes, reading the partials the state
// refers to from the capture's Badger read; it discards that read.
func (c *snapCapture) encode(maxBytes int64) ([]byte, error) {
	b := append([]byte(clusterSnapMagic), clusterSnapVersion)
	b = binary.AppendUvarint(b, uint64(len(c.stream)))
	b = append(b, c.stream...)
	b = binary.AppendUvarint(b, c.walPos)
	b = binary.AppendUvarint(b, c.gen)
	b = binary.AppendUvarint(b, uint64(len(c.state)))
	b = append(b, c.state...)
	var parts []byte
	n := 0
	if c.txn != nil {
		defer c.txn.Discard()
		for _, prefix := range hublog.PartialPrefixes(c.gen) {
			it := c.txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true, PrefetchSize: 256})
			for it.Rewind(); it.Valid(); it.Next() {
				parts = binary.AppendUvarint(parts, uint64(len(it.Item().Key())))
				parts = append(parts, it.Item().Key()...)
				err := it.Item().Value(func(v []byte) error {
					parts = binary.AppendUvarint(parts, uint64(len(v)))
					parts = append(parts, v...)
					return nil
				})
				if err != nil {
					it.Close()
					return nil, err
				}
				n++
				if int64(len(b)+len(parts)) > maxBytes {
					it.Close()
					return nil, fmt.Errorf("%w: state and partials exceed %d bytes", natslog.ErrSnapshotTooLarge, maxBytes)
				}
			}
			it.Close()
		}
	}
	b = binary.AppendUvarint(b, uint64(n))
	return append(b, parts...), nil
}

// decodedSnap is a decoded state snapshot.
type decodedSnap struct {
	stream      string
	walPos, gen uint64
	state       []byte
	partials    []kv
}

// decodeClusterSnap decodes a state snapshot, bounding every length by
// what remains.
func decodeClusterSnap(b []byte) (*decodedSnap, error) {
	if len(b) < len(clusterSnapMagic)+1 || string(b[:len(clusterSnapMagic)]) != clusterSnapMagic {
		return nil, errors.New("not a hub state snapshot (magic)")
	}
	if b[len(clusterSnapMagic)] != clusterSnapVersion {
		return nil, fmt.Errorf("hub state snapshot version %d, this hub reads %d", b[len(clusterSnapMagic)], clusterSnapVersion)
	}
	b = b[len(clusterSnapMagic)+1:]
	uv := func(what string) (uint64, error) {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, fmt.Errorf("bad %s", what)
		}
		b = b[n:]
		return v, nil
	}
	bytesOf := func(what string) ([]byte, error) {
		n, err := uv(what + " length")
		if err != nil {
			return nil, err
		}
		if n > uint64(len(b)) {
			return nil, fmt.Errorf("%s of %d bytes, %d remain", what, n, len(b))
		}
		out := b[:n]
		b = b[n:]
		return out, nil
	}
	d := &decodedSnap{}
	stream, err := bytesOf("stream name")
	if err != nil {
		return nil, err
	}
	if len(stream) > 64 {
		return nil, fmt.Errorf("stream name of %d bytes", len(stream))
	}
	d.stream = string(stream)
	if d.walPos, err = uv("log position"); err != nil {
		return nil, err
	}
	if d.gen, err = uv("partial generation"); err != nil {
		return nil, err
	}
	if d.state, err = bytesOf("state"); err != nil {
		return nil, err
	}
	count, err := uv("partial count")
	if err != nil {
		return nil, err
	}
	if count > uint64(len(b))/2 {
		return nil, fmt.Errorf("%d partials in %d bytes", count, len(b))
	}
	d.partials = make([]kv, 0, count)
	for range count {
		var p kv
		if p.k, err = bytesOf("partial key"); err != nil {
			return nil, err
		}
		if err := hublog.CheckPartialKey(p.k, d.gen); err != nil {
			return nil, err
		}
		if p.v, err = bytesOf("partial value"); err != nil {
			return nil, err
		}
		d.partials = append(d.partials, p)
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%d bytes after the last partial", len(b))
	}
	return d, nil
}

// captureSnapshot takes the applied state, its stream positions and a
// read of the partials on the applier goroutine, between groups. It
// returns nil when nothing from the stream was applied since the last
// stored snapshot.
func (s *Server) captureSnapshot() (*snapCapture, error) {
	c := &snapCapture{}
	err := s.inApplier(func() error {
		if len(s.cl.snap.applied) == 0 || maps.Equal(s.cl.snap.applied, s.cl.snap.lastPosSeen()) {
			c = nil
			return nil
		}
		start := time.Now()
		defer func() { c.pause = time.Since(start) }()
		state, err := s.stateBytes() // flushes the engine's partials
		if err != nil {
			return err
		}
		c.stream, c.state, c.walPos, c.positions = s.opts.NATS.Log.Stream, state, s.app.lastSeq, maps.Clone(s.cl.snap.applied)
		if s.agg != nil {
			c.gen = s.agg.store.Generation()
			c.txn = s.st.DB.NewTransaction(false)
		}
		return nil
	})
	return c, err
}

// lastPosSeen returns the positions of the last stored snapshot; it is
// set under upMu and read on the applier, so it is swapped whole.
func (cs *clusterSnap) lastPosSeen() map[int]uint64 {
	if p := cs.lastPosPtr.Load(); p != nil {
		return *p
	}
	return nil
}

// snapshotNow captures the state and stores it as the next snapshot
// generation; one at a time. ErrSnapshotConflict is another writer's
// snapshot: logged, and the next Put names the head generation it wrote.
func (s *Server) snapshotNow(ctx context.Context) error {
	cs := &s.cl.snap
	cs.upMu.Lock()
	defer cs.upMu.Unlock()
	snaps := cs.store.Load()
	if snaps == nil {
		return errors.New("cluster mode: snapshot store not open yet")
	}
	if !cs.genKnown {
		g, err := snaps.HeadGeneration(ctx)
		if err != nil {
			s.clm.snap.uploads.WithLabelValues("error").Inc()
			return fmt.Errorf("cluster mode: reading the snapshot pointer: %w", err)
		}
		cs.gen, cs.genKnown = g, true
	}
	c, err := s.captureSnapshot()
	if err != nil || c == nil {
		if err != nil {
			s.clm.snap.uploads.WithLabelValues("error").Inc()
		}
		return err
	}
	start := time.Now()
	b, err := c.encode(s.opts.NATS.snapMaxBytes())
	if err != nil {
		s.clm.snap.uploads.WithLabelValues("error").Inc()
		return fmt.Errorf("cluster mode: encoding a state snapshot: %w", err)
	}
	gen, err := snaps.Put(ctx, natslog.Snapshot{Positions: c.positions, State: b, Taken: s.opts.Now(), Hub: s.opts.ClientID, Generation: cs.gen})
	switch {
	case err == nil:
		cs.gen = gen
		pos := c.positions
		cs.lastPosPtr.Store(&pos)
		cs.lastPause = c.pause
		s.clm.snap.uploads.WithLabelValues("ok").Inc()
		s.clm.snap.bytes.Set(float64(len(b)))
		s.log.Info("cluster mode: state snapshot stored", "generation", gen, "bytes", len(b), "log_position", c.walPos,
			"partitions", len(c.positions), "applier_pause", c.pause.Round(time.Microsecond), "took", time.Since(start).Round(time.Millisecond))
		return nil
	case errors.Is(err, natslog.ErrSnapshotConflict):
		s.clm.snap.uploads.WithLabelValues("conflict").Inc()
		s.log.Error("cluster mode: another writer stored a state snapshot since this hub's last one; two hubs may be reading the stream", "expected_generation", cs.gen, "err", err)
	default:
		s.clm.snap.uploads.WithLabelValues("error").Inc()
		s.log.Error("cluster mode: storing a state snapshot failed; retried at the next interval", "err", err)
	}
	cs.genKnown = false // read the head again before the next Put
	return err
}

// snapshotLoop opens the snapshot store, checks a restored snapshot's
// positions against the stream, then stores a snapshot every
// SnapshotInterval until ctx ends.
func (s *Server) snapshotLoop(ctx context.Context, js jetstream.JetStream, l *natslog.Log) {
	cs := &s.cl.snap
	for delay := 100 * time.Millisecond; cs.store.Load() == nil; delay = min(2*delay, 5*time.Second) {
		actx, cancel := context.WithTimeout(ctx, s.opts.PublishTimeout)
		snaps, err := natslog.OpenSnapshots(actx, js, s.opts.NATS.snapOptions())
		cancel()
		if err == nil {
			cs.store.Store(snaps)
			break
		}
		s.rejLog.log(s.log, "snapshot", "", "cluster mode: opening the snapshot buckets failed; retrying", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
	}
	switch {
	case cs.restoredPos != nil:
		s.checkPositions(ctx, l, cs.restoredPos, s.opts.NATS.Log.Partitions, "the restored snapshot's positions")
	case len(s.cl.from) > 0:
		// A local data directory: only partitions it holds a position of.
		s.checkPositions(ctx, l, s.cl.from, 0, "this hub's committed positions (its data directory is older than the stream's retention)")
	}
	t := time.NewTicker(s.opts.NATS.SnapshotInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = s.snapshotNow(ctx) // logged and counted
		}
	}
}

// checkPositions logs and counts the partitions whose messages after
// their position the stream may have dropped: retention drops the
// stream's oldest messages, so a partition whose position + 1 is at or
// after the stream's first sequence lost nothing. n > 0 checks partitions
// 0..n-1 (no position: 0), n == 0 only those in pos.
func (s *Server) checkPositions(ctx context.Context, l *natslog.Log, pos map[int]uint64, n int, what string) {
	for delay := 100 * time.Millisecond; ctx.Err() == nil; delay = min(2*delay, 5*time.Second) {
		actx, cancel := context.WithTimeout(ctx, s.opts.PublishTimeout)
		f, err := l.Fullness(actx)
		cancel()
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(delay):
			}
			continue
		}
		gaps := restoreGaps(pos, n, f.FirstSeq)
		if len(gaps) > 0 {
			s.clm.snap.gaps.Add(float64(len(gaps)))
			s.log.Error("cluster mode: the stream no longer holds every message after "+what+": events of these partitions between their position and the stream's first sequence are lost",
				"stream_first_seq", f.FirstSeq, "partitions", gaps, "snapshot_generation", s.cl.snap.restoredGen)
		}
		return
	}
}

// restoreGaps returns the partitions whose position + 1 is before the
// stream's first sequence: of 0..n-1 (no position counts as 0), or with
// n == 0 of those in pos; in increasing order.
func restoreGaps(pos map[int]uint64, n int, firstSeq uint64) []int {
	var out []int
	if n == 0 {
		for p, seq := range pos {
			if seq+1 < firstSeq {
				out = append(out, p)
			}
		}
		slices.Sort(out)
		return out
	}
	for p := range n {
		if pos[p]+1 < firstSeq {
			out = append(out, p)
		}
	}
	return out
}

// restoreFromSnapshot restores, in cluster mode on an empty data
// directory, the latest state snapshot into the store: the partials its
// engine refers to, the applied ranges its registry holds, a local
// checkpoint of its state at its log position and its stream positions.
// recoverState then recovers from that checkpoint as after a local
// restart. No snapshot: the hub reads every partition from the stream's
// start. A fallback to an older generation is logged; no readable
// generation is logged loudly and the hub reads from the start.
func (s *Server) restoreFromSnapshot(ctx context.Context) error {
	if s.cl == nil {
		return nil
	}
	empty, err := s.st.IsEmpty()
	if err != nil || !empty {
		return err
	}
	snap, result, err := s.latestSnapshot(ctx)
	if err != nil || result == "" {
		return err
	}
	start := time.Now()
	d, err := decodeClusterSnap(snap.State)
	if err != nil {
		s.clm.snap.restores.WithLabelValues("unreadable").Inc()
		s.log.Error("cluster mode: the latest state snapshot does not decode; reading every partition from the stream's start (what retention dropped is lost)",
			"generation", snap.Generation, "err", err)
		return nil
	}
	if d.stream != s.opts.NATS.Log.Stream {
		s.clm.snap.restores.WithLabelValues("unreadable").Inc()
		s.log.Error("cluster mode: the latest state snapshot is of another stream; reading every partition from the stream's start",
			"generation", snap.Generation, "snapshot_stream", d.stream, "stream", s.opts.NATS.Log.Stream)
		return nil
	}
	if err := s.restoreState(d.state); err != nil {
		return fmt.Errorf("cluster mode: restoring state snapshot generation %d: %w", snap.Generation, err)
	}
	if err := s.writeRestored(d, snap.Positions); err != nil {
		return fmt.Errorf("cluster mode: writing state snapshot generation %d into %s: %w", snap.Generation, s.st.Dir, err)
	}
	s.clm.snap.restores.WithLabelValues(result).Inc()
	s.cl.snap.restoredGen, s.cl.snap.restoredPos = snap.Generation, snap.Positions
	s.cl.snap.gen, s.cl.snap.genKnown = snap.Generation, false // the head may be newer after a fallback
	pos := maps.Clone(snap.Positions)
	s.cl.snap.lastPosPtr.Store(&pos)
	s.log.Info("cluster mode: restored the state snapshot into an empty data directory", "generation", snap.Generation,
		"taken", snap.Taken, "by", snap.Hub, "bytes", len(snap.State), "log_position", d.walPos, "partials", len(d.partials),
		"partitions", len(snap.Positions), "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// latestSnapshot reads the latest readable snapshot, waiting while NATS
// is unreachable (the readiness reason says so). result is "latest" or
// "fallback" (the restores metric's label, counted once restored), ""
// when there is none to restore.
func (s *Server) latestSnapshot(ctx context.Context) (natslog.Snapshot, string, error) {
	if s.tr == nil {
		if err := s.dialNATS(); err != nil {
			return natslog.Snapshot{}, "", err
		}
	}
	defer s.cl.snap.waiting.Store(nil)
	js, err := jetstream.New(s.cl.bus.Load().Conn())
	if err != nil {
		return natslog.Snapshot{}, "", fmt.Errorf("cluster mode: %w", err)
	}
	var failing time.Time // first failure with NATS connected
	for delay := 100 * time.Millisecond; ; delay = min(2*delay, 5*time.Second) {
		actx, cancel := context.WithTimeout(ctx, s.opts.PublishTimeout)
		snaps, err := natslog.OpenSnapshots(actx, js, s.opts.NATS.snapOptions())
		var snap natslog.Snapshot
		if err == nil {
			snap, err = snaps.Latest(actx)
		}
		cancel()
		var fb *natslog.SnapshotFallbackError
		switch {
		case err == nil:
			return snap, "latest", nil
		case errors.As(err, &fb):
			s.log.Error("cluster mode: the latest state snapshot is unreadable; restoring an older generation (its partitions are read from older positions)",
				"head", fb.Head, "used", fb.Used, "err", fb.Cause)
			return snap, "fallback", nil
		case errors.Is(err, natslog.ErrNoSnapshot):
			s.clm.snap.restores.WithLabelValues("none").Inc()
			s.log.Info("cluster mode: empty data directory and no state snapshot: reading every partition from the stream's start")
			return natslog.Snapshot{}, "", nil
		case errors.Is(err, natslog.ErrCorruptSnapshot), errors.Is(err, natslog.ErrSnapshotMissing), errors.Is(err, natslog.ErrSnapshotTooLarge):
			s.clm.snap.restores.WithLabelValues("unreadable").Inc()
			s.log.Error("cluster mode: no stored state snapshot is readable; reading every partition from the stream's start (what retention dropped is lost)", "err", err)
			return natslog.Snapshot{}, "", nil
		}
		if ctx.Err() != nil {
			return natslog.Snapshot{}, "", fmt.Errorf("cluster mode: stopped while reading the state snapshot: %w (last error: %v)", ctx.Err(), err)
		}
		why := "restoring a NATS state snapshot: " + err.Error()
		var apiErr *jetstream.APIError
		switch {
		case s.cl.bus.Load() == nil || !s.cl.bus.Load().Connected():
			why = "restoring a NATS state snapshot: NATS not connected"
			failing = time.Time{}
		case !errors.As(err, &apiErr) || apiErr.ErrorCode == jsTemporarilyUnavailable:
			failing = time.Time{} // unreachable or electing: wait, the snapshot may be there
		case failing.IsZero():
			failing = time.Now()
		case time.Since(failing) >= snapshotStartWait:
			// JetStream keeps refusing the snapshot buckets (no storage
			// for them, say): a retry does not fix that, and the stream
			// may still hold everything.
			s.clm.snap.restores.WithLabelValues("unavailable").Inc()
			s.log.Error("cluster mode: the NATS snapshot store keeps failing; reading every partition from the stream's start (what retention dropped is lost)",
				"failing_for", time.Since(failing).Round(time.Second), "err", err)
			return natslog.Snapshot{}, "", nil
		}
		s.cl.snap.waiting.Store(&why)
		s.log.Warn("cluster mode: empty data directory; waiting for the NATS snapshot store", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(delay):
		}
	}
}

// writeRestored writes a restored snapshot into the empty store: the
// partials first (without a checkpoint a store holding only them is still
// empty, and a restart restores again), then the checkpoint, then the
// applied ranges and the positions in one transaction. A store without
// ranges or positions counts as empty, so a crash before that transaction
// restores again; once it is written, a restart recovers locally.
func (s *Server) writeRestored(d *decodedSnap, positions map[int]uint64) error {
	for p := range positions {
		if p < 0 || p >= s.opts.NATS.Log.Partitions {
			return fmt.Errorf("the snapshot holds a position of partition %d; the stream has %d partitions", p, s.opts.NATS.Log.Partitions)
		}
	}
	wb := s.st.DB.NewWriteBatch()
	for _, p := range d.partials {
		if err := wb.Set(p.k, p.v); err != nil {
			wb.Cancel()
			return err
		}
	}
	if err := wb.Flush(); err != nil {
		return err
	}
	if _, err := s.st.WriteCheckpoint(d.walPos, d.state, s.opts.Now().UnixNano()); err != nil {
		return err
	}
	if s.cl.snap.failAfterCheckpoint {
		return errors.New("stopped after the checkpoint (test)")
	}
	return s.st.DB.Update(func(txn *badger.Txn) error {
		for k, st := range s.reg.DedupStates() {
			if err := txn.Set(hublog.RangesKey(k.Device, k.ID), hublog.EncodeDedup(st)); err != nil {
				return err
			}
		}
		for p, seq := range positions {
			if err := txn.Set(hublog.LogPositionKey(s.opts.NATS.Log.Stream, p), hublog.EncodeLogPosition(seq)); err != nil {
				return err
			}
		}
		return nil
	})
}
