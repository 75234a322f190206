package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"edgeflow/hub/natsbus"
	"edgeflow/hub/natslog"
)

// Stream is the hub's hold on cluster mode's stream: the NATS transport,
// the stream once ensured and why it is unavailable, which keeps the hub
// from being ready. Set the exported fields before use; the zero value
// of the rest is a stream not dialled yet.
type Stream struct {
	Name    string        // the stream's name, for readiness reasons and logs
	Timeout time.Duration // bounds each call to NATS
	Logger  *slog.Logger
	Metrics *Metrics
	// CatchUp keeps the hub not ready until it has applied what the
	// stream held when it started (catchup.go).
	CatchUp CatchUp

	bus atomic.Pointer[natsbus.Bus]
	log atomic.Pointer[natslog.Log] // set once Ensure succeeded
	err atomic.Pointer[string]      // the last failure to reach the stream; nil: reachable
	// waiting is why LatestSnapshot is still waiting; nil when it is not.
	waiting atomic.Pointer[string]
	// opening is why Open is still trying; nil when it is not.
	opening atomic.Pointer[string]
}

// SetBus records the NATS transport once dialled.
func (st *Stream) SetBus(b *natsbus.Bus) { st.bus.Store(b) }

// Bus returns the NATS transport, nil before it is dialled.
func (st *Stream) Bus() *natsbus.Bus { return st.bus.Load() }

// Restoring says why the hub still waits for the snapshot store while
// LatestSnapshot runs; "" when it does not wait.
func (st *Stream) Restoring() string {
	if w := st.waiting.Load(); w != nil {
		return *w
	}
	return ""
}

// Log returns the stream, nil until Ensure succeeded.
func (st *Stream) Log() *natslog.Log { return st.log.Load() }

// Ensure runs natslog.EnsureStream until it succeeds, fails for a reason
// a retry cannot fix (another layout, an invalid option), or ctx ends;
// meanwhile the last failure is the readiness reason. A stream whose
// layout differs fails with natslog's error, which says what the stream
// has.
func (st *Stream) Ensure(ctx context.Context, js jetstream.JetStream, o natslog.Options) (*natslog.Log, error) {
	for delay := 100 * time.Millisecond; ; delay = min(2*delay, 5*time.Second) {
		actx, cancel := context.WithTimeout(ctx, st.Timeout)
		l, err := natslog.EnsureStream(actx, js, o)
		cancel()
		switch {
		case err == nil:
			st.log.Store(l)
			st.err.Store(nil)
			return l, nil
		case errors.Is(err, natslog.ErrPartitionsChanged), errors.Is(err, natslog.ErrStreamMismatch), errors.Is(err, natslog.ErrInvalidOption):
			return nil, fmt.Errorf("cluster mode: %w", err)
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("cluster mode: stopped while waiting for stream %s: %w", st.Name, ctx.Err())
		}
		msg := err.Error()
		st.err.Store(&msg)
		st.Logger.Warn("cluster mode: stream not reachable yet; retrying", "stream", st.Name, "err", err)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("cluster mode: stopped while waiting for stream %s: %w (last error: %v)", st.Name, ctx.Err(), err)
		case <-time.After(delay):
		}
	}
}

// Open runs open until it succeeds, fails with an error permanent
// reports (one a retry cannot fix: an invalid option, a bucket of other
// settings, a duplicate hub id), or ctx ends; each try is bounded by
// Timeout when bounded is set (a try that itself waits longer, as
// lease.Open may, is not), and the delay between tries grows from 100 ms
// to 5 s.
// Meanwhile the last failure is the readiness reason ("opening WHAT: ...").
// Cluster mode opens the buckets beside the stream (partition checkpoints,
// leases) so: a JetStream cluster still electing its leaders, or busy,
// times such requests out at start, which must delay the hub, not stop it.
func (st *Stream) Open(ctx context.Context, what string, bounded bool, permanent func(error) bool, open func(context.Context) error) error {
	defer st.opening.Store(nil)
	for delay := 100 * time.Millisecond; ; delay = min(2*delay, 5*time.Second) {
		actx, cancel := context.WithCancel(ctx)
		if bounded {
			actx, cancel = context.WithTimeout(ctx, st.Timeout)
		}
		err := open(actx)
		cancel()
		if err == nil {
			return nil
		}
		if permanent(err) {
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("cluster mode: stopped while opening %s: %w (last error: %v)", what, ctx.Err(), err)
		}
		msg := "opening " + what + ": " + err.Error()
		st.opening.Store(&msg)
		st.Logger.Warn("cluster mode: could not open "+what+"; retrying", "err", err, "retry_in", delay)
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster mode: stopped while opening %s: %w (last error: %v)", what, ctx.Err(), err)
		case <-time.After(delay):
		}
	}
}

// Poll updates the stream's gauges and reachability every PollInterval
// until ctx ends. A stream without a quorum of current replicas is down:
// it refuses writes.
func (st *Stream) Poll(ctx context.Context, l *natslog.Log) {
	t := time.NewTicker(PollInterval)
	defer t.Stop()
	for {
		actx, cancel := context.WithTimeout(ctx, st.Timeout)
		f, err := l.Fullness(actx)
		cancel()
		switch {
		case err != nil && ctx.Err() == nil:
			st.down(err.Error())
		case err == nil && !f.Quorum():
			st.down(fmt.Sprintf("only %d of its %d replicas are current (no quorum: writes are refused)", f.Current, f.Replicas))
		case err == nil:
			st.err.Store(nil)
			st.Metrics.Up.Set(1)
			st.Metrics.Bytes.Set(float64(f.Bytes))
			st.Metrics.MaxBytes.Set(float64(f.MaxBytes))
			st.Metrics.Fullness.Set(f.Ratio())
			st.Metrics.LastSeq.Set(float64(f.LastSeq))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// down records why the stream is unavailable.
func (st *Stream) down(why string) {
	st.err.Store(&why)
	st.Metrics.Up.Set(0)
}

// NotReady says why the stream keeps the hub from being ready: NATS
// disconnected, or the stream not ensured or not answering; "" when all
// is well.
func (st *Stream) NotReady() string {
	switch {
	case st.bus.Load() == nil || !st.bus.Load().Connected():
		return "NATS not connected"
	case st.opening.Load() != nil:
		return *st.opening.Load()
	case st.log.Load() == nil:
		if e := st.err.Load(); e != nil {
			return "NATS stream " + st.Name + " not reachable: " + *e
		}
		return "NATS stream " + st.Name + " not ensured yet"
	}
	if e := st.err.Load(); e != nil {
		return "NATS stream " + st.Name + " unavailable: " + *e
	}
	return st.CatchUp.NotReady()
}

// CheckPositions logs and counts (Metrics.Snap.Gaps) the partitions
// whose messages after their position the stream may have dropped:
// retention drops the stream's oldest messages, so a partition whose
// position + 1 is at or after the stream's first sequence lost nothing.
// n > 0 checks partitions 0..n-1 (no position: 0), n == 0 only those in
// pos. what names the positions in the log; gen is the restored
// snapshot's generation (0: none). It retries reading the stream until
// ctx ends.
func (st *Stream) CheckPositions(ctx context.Context, l *natslog.Log, pos map[int]uint64, n int, what string, gen uint64) {
	for delay := 100 * time.Millisecond; ctx.Err() == nil; delay = min(2*delay, 5*time.Second) {
		actx, cancel := context.WithTimeout(ctx, st.Timeout)
		f, err := l.Fullness(actx)
		cancel()
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(delay):
			}
			continue
		}
		gaps := RestoreGaps(pos, n, f.FirstSeq)
		if len(gaps) > 0 {
			st.Metrics.Snap.Gaps.Add(float64(len(gaps)))
			st.Logger.Error("cluster mode: the stream no longer holds every message after "+what+": events of these partitions between their position and the stream's first sequence are lost",
				"stream_first_seq", f.FirstSeq, "partitions", gaps, "snapshot_generation", gen)
		}
		return
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

// LatestSnapshot reads the latest readable snapshot from the store o
// names, waiting while NATS is unreachable (Restoring says so meanwhile).
// The second result is "latest" or "fallback" (the restores metric's
// label, which the caller counts once restored), "" when there is none
// to restore; none and unreadable ones are counted here.
// Unreachable servers, timeouts and elections are waited out until ctx
// ends; JetStream refusing the buckets for snapshotStartWait gives up.
func (st *Stream) LatestSnapshot(ctx context.Context, js jetstream.JetStream, o natslog.SnapshotOptions) (natslog.Snapshot, string, error) {
	defer st.waiting.Store(nil)
	var failing time.Time // first failure with NATS connected
	for delay := 100 * time.Millisecond; ; delay = min(2*delay, 5*time.Second) {
		actx, cancel := context.WithTimeout(ctx, st.Timeout)
		snaps, err := natslog.OpenSnapshots(actx, js, o)
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
			st.Logger.Error("cluster mode: the latest state snapshot is unreadable; restoring an older generation (its partitions are read from older positions)",
				"head", fb.Head, "used", fb.Used, "err", fb.Cause)
			return snap, "fallback", nil
		case errors.Is(err, natslog.ErrNoSnapshot):
			st.Metrics.Snap.Restores.WithLabelValues("none").Inc()
			st.Logger.Info("cluster mode: empty data directory and no state snapshot: reading every partition from the stream's start")
			return natslog.Snapshot{}, "", nil
		case errors.Is(err, natslog.ErrCorruptSnapshot), errors.Is(err, natslog.ErrSnapshotMissing), errors.Is(err, natslog.ErrSnapshotTooLarge):
			st.Metrics.Snap.Restores.WithLabelValues("unreadable").Inc()
			st.Logger.Error("cluster mode: no stored state snapshot is readable; reading every partition from the stream's start (what retention dropped is lost)", "err", err)
			return natslog.Snapshot{}, "", nil
		}
		if ctx.Err() != nil {
			return natslog.Snapshot{}, "", fmt.Errorf("cluster mode: stopped while reading the state snapshot: %w (last error: %v)", ctx.Err(), err)
		}
		why := "restoring a NATS state snapshot: " + err.Error()
		var apiErr *jetstream.APIError
		switch {
		case st.Bus() == nil || !st.Bus().Connected():
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
			st.Metrics.Snap.Restores.WithLabelValues("unavailable").Inc()
			st.Logger.Error("cluster mode: the NATS snapshot store keeps failing; reading every partition from the stream's start (what retention dropped is lost)",
				"failing_for", time.Since(failing).Round(time.Second), "err", err)
			return natslog.Snapshot{}, "", nil
		}
		st.waiting.Store(&why)
		st.Logger.Warn("cluster mode: empty data directory; waiting for the NATS snapshot store", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(delay):
		}
	}
}
