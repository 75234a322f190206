package cluster

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"edgeflow/hub/natslog"
)

// CatchUp tracks whether the hub has applied, in every partition, what
// the stream held when the hub started: a hub restored from a snapshot
// (or on an empty data directory) has a state far behind the stream
// until it has replayed it, and is not ready meanwhile. Once caught up it
// stays so: later lag is load, not a start. The zero value is a hub not
// started in cluster mode (no partitions: caught up).
type CatchUp struct {
	mu      sync.Mutex
	applied []uint64 // per partition: the last sequence applied (or decided)
	target  []uint64 // per partition: its last sequence at start; nil until read
	readErr string   // the last failure to read the targets
	// skip is, per partition, the last message the reader skipped (seq)
	// and the last one delivered before it (after): once after is
	// applied, the partition is decided up to seq.
	skip []struct{ seq, after uint64 }
	done bool
	lag  *prometheus.GaugeVec
	// notOwned marks the partitions another hub applies (Own): they
	// count as caught up here.
	notOwned []bool
}

// Own says whether this hub applies partition p (several hubs sharing
// the stream): a partition it does not own counts as caught up.
func (c *CatchUp) Own(p int, owned bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p < 0 || p >= len(c.applied) {
		return
	}
	if c.notOwned == nil {
		c.notOwned = make([]bool, len(c.applied))
	}
	c.notOwned[p] = !owned
	if c.target != nil && !c.done {
		c.update()
	}
}

// behindAt reports whether partition p is behind its target (under mu).
func (c *CatchUp) behindAt(p int) bool {
	return c.applied[p] < c.target[p] && (c.notOwned == nil || !c.notOwned[p])
}

// Init sizes the tracker for n partitions starting at the positions from
// (the committed positions loaded at start) and sets lag, the per
// partition gauge it updates (nil: none). Call before the pipeline runs.
func (c *CatchUp) Init(n int, from map[int]uint64, lag *prometheus.GaugeVec) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.applied = make([]uint64, n)
	c.skip = make([]struct{ seq, after uint64 }, n)
	for p, seq := range from {
		if p >= 0 && p < n {
			c.applied[p] = seq
		}
	}
	c.lag = lag
}

// Applied records that partition p is applied up to seq.
func (c *CatchUp) Applied(p int, seq uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p < 0 || p >= len(c.applied) || seq <= c.applied[p] {
		return
	}
	c.applied[p] = seq
	c.advance(p)
}

// Skipped records that the reader of partition p skipped message seq (a
// subject naming no valid device), after having delivered every message
// up to after: such a message never reaches the applier, so without this
// a partition ending in one would never catch up.
func (c *CatchUp) Skipped(p int, seq, after uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p < 0 || p >= len(c.applied) || seq <= c.skip[p].seq {
		return
	}
	c.skip[p].seq, c.skip[p].after = seq, after
	c.advance(p)
}

// advance moves partition p past a skipped message once what preceded it
// is applied, and updates the state (under mu).
func (c *CatchUp) advance(p int) {
	if sk := c.skip[p]; sk.seq > c.applied[p] && c.applied[p] >= sk.after {
		c.applied[p] = sk.seq
	}
	if c.target != nil && !c.done {
		c.update()
	}
}

// update sets the lag gauge and done (under mu, targets known).
func (c *CatchUp) update() {
	behind := 0
	for p, t := range c.target {
		lag := uint64(0)
		if c.behindAt(p) {
			lag = t - c.applied[p]
			behind++
		}
		if c.lag != nil {
			c.lag.WithLabelValues(strconv.Itoa(p)).Set(float64(lag))
		}
	}
	c.done = behind == 0
}

// SetTargets records each partition's last sequence at start.
func (c *CatchUp) SetTargets(target []uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.target = target
	c.update()
}

// Behind returns how many partitions are behind their target and whether
// the targets are known yet.
func (c *CatchUp) Behind() (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done || len(c.applied) == 0 {
		return 0, true
	}
	if c.target == nil {
		return 0, false
	}
	n := 0
	for p := range c.target {
		if c.behindAt(p) {
			n++
		}
	}
	return n, true
}

// NotReady says why the hub has not caught up ("" once it has).
func (c *CatchUp) NotReady() string {
	n, known := c.Behind()
	switch {
	case !known:
		c.mu.Lock()
		e := c.readErr
		c.mu.Unlock()
		if e != "" {
			return "catching up with the stream: reading each partition's last sequence failed: " + e
		}
		return "catching up with the stream: reading each partition's last sequence"
	case n > 0:
		return fmt.Sprintf("catching up with the stream: %d partitions behind", n)
	}
	return ""
}

// Status is the catch-up state for a status answer: per partition, the
// applied position and the stream's last sequence at start (nil until
// read).
func (c *CatchUp) Status() (applied, target []uint64, done bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]uint64(nil), c.applied...), append([]uint64(nil), c.target...), c.done
}

// ReadTargets reads each partition's last sequence (Log.PartitionLastSeq),
// each call bounded by timeout, retrying with a backoff until it succeeds
// or ctx ends; meanwhile NotReady names the failure.
func (c *CatchUp) ReadTargets(ctx context.Context, l *natslog.Log, timeout time.Duration) {
	n := l.Options().Partitions
	for delay := 100 * time.Millisecond; ctx.Err() == nil; delay = min(2*delay, 5*time.Second) {
		target := make([]uint64, n)
		var err error
		for p := range n {
			actx, cancel := context.WithTimeout(ctx, timeout)
			target[p], err = l.PartitionLastSeq(actx, p)
			cancel()
			if err != nil {
				break
			}
		}
		if err == nil {
			c.SetTargets(target)
			return
		}
		c.mu.Lock()
		c.readErr = err.Error()
		c.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(delay):
		}
	}
}
