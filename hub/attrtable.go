package hub

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	badger "github.com/dgraph-io/badger/v4"

	"edgeflow/aggregate"
	"edgeflow/hub/api"
	"edgeflow/hub/attrs"
	"edgeflow/hub/hublog"
)

// AttrsConsumerName is the name of the device attribute table's snapshot
// in the hub's checkpoint.
const AttrsConsumerName = "attributes"

// errNotLogged answers a write whose entry the committer did not log.
var errNotLogged = errors.New("hub: the entry was not logged")

// applyAttrs puts the version an attribute entry holds in the table and
// tells the engine which event times it changed.
func (a *applier) applyAttrs(e *hublog.Entry) error {
	if a.attrs == nil {
		return nil
	}
	v, err := attrs.DecodeVersion(e.Payload, a.attrs.Limits())
	if err != nil {
		return fmt.Errorf("%w: log entry %d: %v", hublog.ErrCorrupt, e.Seq, err)
	}
	v.Written = e.ServerTimeNs
	ch := a.attrs.Put(e.Device, v)
	if a.revise != nil {
		a.revise(e.Device, v, ch, e.Seq)
	}
	return nil
}

// engineReviser returns the applier's revise hook for eng: each version
// is announced on the update stream, and the final windows whose version
// changed are revised.
func engineReviser(eng *aggregate.Engine) func(string, attrs.Version, attrs.Change, uint64) {
	return func(device string, v attrs.Version, ch attrs.Change, seq uint64) {
		from, to := ch.From, ch.To
		if !ch.Changed {
			to = from
		}
		eng.ReviseDevice(device, v, from, to, seq)
	}
}

// attrConsumer checkpoints the attribute table with the hub's state
// (batches pass it by: the table changes only by attribute entries).
type attrConsumer struct {
	t      *attrs.Table
	oldest func(device string) (int64, bool) // nil: no compaction
}

func (c *attrConsumer) Name() string        { return AttrsConsumerName }
func (c *attrConsumer) Apply(*AppliedBatch) {}

// Snapshot compacts the table (versions older than each device's oldest
// stored event fold into the version in force then) and encodes it.
func (c *attrConsumer) Snapshot() ([]byte, error) {
	if c.oldest != nil {
		c.t.Compact(c.oldest)
	}
	return c.t.Snapshot(), nil
}

func (c *attrConsumer) Restore(b []byte) error { return c.t.Restore(b) }

// oldestEvent returns a lower bound of the event time of device's oldest
// stored event, from the event-time index (each level's first key: a
// bucket start, or the catch-all's earliest event time), and false when
// the index holds none of its events.
func oldestEvent(db *badger.DB, device string) (int64, bool) {
	best, found := int64(math.MaxInt64), false
	_ = db.View(func(txn *badger.Txn) error {
		prefix := hublog.EventIndexPrefix(device)
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer it.Close()
		for l := byte(0); l <= hublog.EventIndexLevelAll; l++ {
			seek := binary.BigEndian.AppendUint64(append(bytes.Clone(prefix), l), hublog.SortableNs(math.MinInt64))
			it.Seek(seek)
			if !it.Valid() {
				break
			}
			k, err := hublog.ParseEventIndexKey(it.Item().Key())
			if err != nil || k.Level != l {
				continue
			}
			best, found = min(best, k.Bucket), true
		}
		return nil
	})
	return best, found
}

// setupAttrs creates the attribute table, checkpoints it as a consumer,
// and joins the engine (when there is one) with it.
func (s *Server) setupAttrs() error {
	s.attrs = attrs.New(attrs.Limits{})
	c := &attrConsumer{t: s.attrs, oldest: func(device string) (int64, bool) {
		if s.st == nil {
			return 0, false
		}
		return oldestEvent(s.st.DB, device)
	}}
	s.opts.Consumers = append(s.opts.Consumers[:len(s.opts.Consumers):len(s.opts.Consumers)], c)
	if s.agg != nil {
		s.agg.eng.SetAttrSource(s.attrs)
	}
	return checkConsumerNames(s.opts.Consumers)
}

// Attributes returns the hub's device attribute table.
func (s *Server) Attributes() *attrs.Table { return s.attrs }

// WriteAttributes logs each write as an attribute entry and returns once
// all are applied (or ctx ends). Writes the table refuses are refused
// before any is logged. In cluster mode the log is the stream: each write
// is published on its device's partition (writeClusterAttrs).
func (s *Server) WriteAttributes(ctx context.Context, ws []api.AttrWrite) error {
	if s.cl != nil {
		return s.writeClusterAttrs(ctx, ws)
	}
	if !s.recovered.Load() || s.com == nil {
		return api.ErrNotReady
	}
	for i, w := range ws {
		if err := s.attrs.Check(w.Device, w.Version); err != nil {
			return fmt.Errorf("write %d (device %s): %w", i+1, w.Device, err)
		}
	}
	ps := make([]*pending, len(ws))
	s.inMu.RLock()
	if s.inClosed {
		s.inMu.RUnlock()
		return api.ErrNotReady
	}
	for i, w := range ws {
		ps[i] = &pending{kind: hublog.KindAttrs, device: w.Device, serverTimeNs: s.opts.Now().UnixNano(),
			payload: attrs.EncodeVersion(w.Version), applied: make(chan error, 1)}
		select {
		case s.com.in <- ps[i]:
		case <-ctx.Done():
			s.inMu.RUnlock()
			return fmt.Errorf("write %d of %d not logged: %w", i+1, len(ws), ctx.Err())
		}
	}
	s.inMu.RUnlock()
	for i, p := range ps {
		select {
		case err := <-p.applied:
			if err != nil {
				return fmt.Errorf("write %d (device %s): %w", i+1, p.device, err)
			}
		case <-ctx.Done():
			return fmt.Errorf("write %d of %d: not yet applied: %w", i+1, len(ps), ctx.Err())
		case <-s.done:
			return api.ErrNotReady
		}
	}
	return nil
}
