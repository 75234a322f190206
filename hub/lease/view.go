package lease

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// seenEntry is the last change of one key as the watcher saw it.
type seenEntry struct {
	live     bool // a put, not a delete, purge or expiry marker
	rec      record
	revision uint64
	created  time.Time // server time of the change
	seen     time.Time // local Clock time the change was seen
}

// epoch is the lease's epoch: the acquiring Create's revision.
func (e seenEntry) epoch() uint64 {
	if e.rec.Epoch != 0 {
		return e.rec.Epoch
	}
	return e.revision
}

// view follows the bucket with a watcher. It only guides decisions: every
// change it suggests is a compare-and-set that the server arbitrates, so
// a stale view delays a takeover but never makes two owners.
type view struct {
	clock Clock
	log   *slog.Logger
	bad   func() // counts a value that does not decode

	mu      sync.Mutex
	keys    map[string]seenEntry
	readyAt time.Time // zero until the watcher delivered the initial values
}

func newView(clock Clock, log *slog.Logger, bad func()) *view {
	return &view{clock: clock, log: log, bad: bad, keys: map[string]seenEntry{}}
}

// run watches kv until ctx ends, starting a new watcher when one ends.
func (v *view) run(ctx context.Context, kv jetstream.KeyValue, retry time.Duration, onErr func()) {
	for ctx.Err() == nil {
		w, err := kv.WatchAll(ctx)
		if err != nil {
			onErr()
			v.log.Warn("lease: watch bucket", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(retry):
			}
			continue
		}
		v.follow(ctx, w)
		_ = w.Stop()
	}
}

// follow applies one watcher's updates until it ends or ctx does.
func (v *view) follow(ctx context.Context, w jetstream.KeyWatcher) {
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			v.apply(e)
		}
	}
}

func (v *view) apply(e jetstream.KeyValueEntry) {
	now := v.clock.Now()
	v.mu.Lock()
	defer v.mu.Unlock()
	if e == nil {
		if v.readyAt.IsZero() {
			v.readyAt = now
		}
		return
	}
	s := seenEntry{revision: e.Revision(), created: e.Created(), seen: now}
	if e.Operation() == jetstream.KeyValuePut {
		r, err := decodeRecord(e.Value())
		if err != nil {
			v.bad()
			v.log.Warn("lease: ignoring an undecodable value (it expires after the TTL)", "key", e.Key(), "revision", e.Revision(), "err", err)
			return
		}
		s.live, s.rec = true, r
	}
	if old, ok := v.keys[e.Key()]; ok && old.revision > s.revision {
		return
	}
	v.keys[e.Key()] = s
}

// snapshot copies the view; ready is false until the initial values
// arrived.
func (v *view) snapshot() (map[string]seenEntry, time.Time, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make(map[string]seenEntry, len(v.keys))
	for k, e := range v.keys {
		out[k] = e
	}
	return out, v.readyAt, !v.readyAt.IsZero()
}

// members are the hub ids whose heartbeat was seen within stale of now.
func members(keys map[string]seenEntry, now time.Time, stale time.Duration) []string {
	var out []string
	for k, e := range keys {
		if id, ok := strings.CutPrefix(k, hubPrefix); ok && e.live && now.Sub(e.seen) <= stale && e.rec.Hub == id {
			out = append(out, id)
		}
	}
	return out
}
