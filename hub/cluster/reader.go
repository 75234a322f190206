package cluster

import (
	"context"
	"errors"
	"time"

	"edgeflow/hub/natslog"
)

// Reader reads stream partitions into the hub: it opens a partition's
// reader, hands each message to Deliver in stream order, and reopens it
// after a failure with a backoff, so one partition's trouble never stops
// the others.
type Reader struct {
	Log     *natslog.Log
	Timeout time.Duration // bounds opening a partition's reader
	Metrics *Metrics      // ReadErrors and BadMessages are counted here
	// Report logs a failure (the hub rate-limits it); err is never nil.
	Report func(msg string, err error)
	// Deliver takes a message; it may block to hold the reader back.
	Deliver func(natslog.Message)
	// Skipped, when set, learns of a skipped message's sequence seq and
	// the sequence of the last message delivered before it (0: none).
	Skipped func(seq, after uint64)
}

// ReadPartition hands partition p's messages from sequence from on to
// Deliver until ctx ends, reopening its reader after a failure (backoff
// 100ms doubling to 5s, reset by a successful open).
func (r *Reader) ReadPartition(ctx context.Context, p int, from uint64) {
	for delay := 100 * time.Millisecond; ctx.Err() == nil; {
		actx, cancel := context.WithTimeout(ctx, r.Timeout)
		pr, err := r.Log.Reader(actx, p, from)
		cancel()
		if err != nil {
			r.Metrics.ReadErrors.Inc()
			r.Report("cluster mode: opening a partition's reader failed; retrying", err)
			select {
			case <-ctx.Done():
			case <-time.After(delay):
			}
			delay = min(2*delay, 5*time.Second)
			continue
		}
		delay = 100 * time.Millisecond
		from = r.readUntilError(ctx, pr, from)
		pr.Close()
	}
}

// readUntilError hands pr's messages to Deliver until pr fails or ctx
// ends and returns the sequence to resume from. A message whose subject
// names no valid device is counted, reported and skipped.
func (r *Reader) readUntilError(ctx context.Context, pr *natslog.Reader, from uint64) uint64 {
	for {
		m, err := pr.Next(ctx)
		if errors.Is(err, natslog.ErrBadSubject) {
			r.Metrics.BadMessages.Inc()
			r.Report("cluster mode: skipped a stream message", err)
			if r.Skipped != nil {
				r.Skipped(m.Seq, from-1)
			}
			from = m.Seq + 1
			continue
		}
		if err != nil {
			if ctx.Err() == nil {
				r.Metrics.ReadErrors.Inc()
				r.Report("cluster mode: reading a partition failed; reopening it", err)
			}
			return from
		}
		from = m.Seq + 1
		r.Deliver(m)
	}
}
