package hub

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"time"

	"edgeflow/hub/api"
	"edgeflow/hub/attrs"
	"edgeflow/hub/batchview"
	"edgeflow/hub/hublog"
	"edgeflow/hub/natslog"
)

// Cluster mode's attribute writes. A version is published as a message of
// the stream on its device's batch subject, with natslog.HeaderKind set,
// so the stream stores it in the device's partition, in order with the
// device's batches. The hub reading that partition logs it locally as a
// hublog.KindAttrs entry and applies it like a single hub's write; a
// restart or another hub replays it from the stream with the batches
// around it.

// clusterAttrApplyWait bounds how long a write waits, once the stream
// has stored it, for this hub to apply it (a hub catching up on a long
// backlog may take longer; the write is durable either way).
const clusterAttrApplyWait = 30 * time.Second

// clusterAttrs holds the attribute writes this hub published and waits
// to see applied, by message ID.
type clusterAttrs struct {
	mu    sync.Mutex
	waits map[string]chan error
	// applyWait replaces clusterAttrApplyWait when set (tests).
	applyWait time.Duration
}

// add registers a write by its message ID; the returned channel takes
// the applier's result.
func (c *clusterAttrs) add(id string) chan error {
	ch := make(chan error, 1)
	c.mu.Lock()
	if c.waits == nil {
		c.waits = map[string]chan error{}
	}
	c.waits[id] = ch
	c.mu.Unlock()
	return ch
}

// take removes and returns the channel of a write (nil: not this hub's,
// or no longer awaited).
func (c *clusterAttrs) take(id string) chan error {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := c.waits[id]
	delete(c.waits, id)
	return ch
}

// writeClusterAttrs publishes each write to the stream and returns once
// the stream stored all of them and this hub applied those of the
// partitions it applies (appliesPartition). Writes the
// table refuses are refused before any is published. A write stored but
// not applied within clusterAttrApplyWait returns api.ErrStoredNotApplied.
func (s *Server) writeClusterAttrs(ctx context.Context, ws []api.AttrWrite) error {
	l := s.cl.Log()
	if l == nil || !s.recovered.Load() {
		return api.ErrNotReady
	}
	for i, w := range ws {
		if err := s.attrs.Check(w.Device, w.Version); err != nil {
			return fmt.Errorf("write %d (device %s): %w", i+1, w.Device, err)
		}
	}
	es := make([]natslog.Entry, len(ws))
	chans := make([]chan error, len(ws))
	for i, w := range ws {
		es[i] = natslog.Entry{Device: w.Device, Data: attrs.EncodeVersion(w.Version), ID: "attrs-" + rand.Text()}
		chans[i] = s.cl.attrs.add(es[i].ID)
	}
	defer func() {
		for _, e := range es {
			s.cl.attrs.take(e.ID)
		}
	}()
	// One publish timeout per window of versions in flight.
	pctx, cancel := context.WithTimeout(ctx, s.opts.PublishTimeout*time.Duration(1+len(ws)/256))
	seqs, err := l.PublishAttrs(pctx, es)
	cancel()
	if err != nil {
		stored := 0
		for stored < len(seqs) && seqs[stored] != 0 {
			stored++
		}
		return &api.PartlyStoredError{Stored: stored, Total: len(ws), Err: fmt.Errorf("cluster mode: storing attribute versions in the stream: %w", err)}
	}
	wait := clusterAttrApplyWait
	if s.cl.attrs.applyWait > 0 {
		wait = s.cl.attrs.applyWait
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	n := s.opts.NATS.Log.Partitions
	for i, ch := range chans {
		if !s.appliesPartition(natslog.PartitionOf(ws[i].Device, n)) {
			continue // stored; its partition's owner applies it
		}
		select {
		case err := <-ch:
			if err != nil {
				return fmt.Errorf("write %d (device %s): %w", i+1, ws[i].Device, err)
			}
		case <-wctx.Done():
			return fmt.Errorf("%w: write %d of %d (device %s) is in the stream (partition %d, sequence %d); writing it again is harmless",
				api.ErrStoredNotApplied, i+1, len(ws), ws[i].Device, natslog.PartitionOf(ws[i].Device, n), seqs[i])
		case <-s.done:
			return fmt.Errorf("%w: write %d of %d (device %s) is in the stream (partition %d, sequence %d); the hub is shutting down",
				api.ErrStoredNotApplied, i+1, len(ws), ws[i].Device, natslog.PartitionOf(ws[i].Device, n), seqs[i])
		}
	}
	return nil
}

// appliesPartition reports whether this hub owns partition p now (its
// lease), so a write to it waits for the apply; a write to another hub's
// partition answers once the stream stored it, and its owner applies it.
func (s *Server) appliesPartition(p int) bool {
	if m := s.LeaseManager(); m != nil {
		_, owns := m.Owns(p)
		return owns
	}
	return false
}

// errStreamEntry marks a stream entry that is not applied.
var errStreamEntry = errors.New("stream entry not applied")

// decodeStreamEntry turns a stream message that is not a batch into its
// pending: an attribute version becomes a KindAttrs entry of the local
// log, applied in the partition's order. One that does not decode or
// validate (or of an unknown kind) is counted, logged at a limited rate
// and not applied; its stream position is still committed. The checks
// depend on the message alone, so a replay decides alike.
func (s *Server) decodeStreamEntry(msg inMsg) *pending {
	p := &pending{kind: hublog.KindAttrs, device: msg.device, serverTimeNs: msg.serverTimeNs, payload: msg.payload,
		logPart: msg.logPart, logSeq: msg.logSeq, logGen: msg.logGen}
	if s.cl != nil && msg.streamID != "" {
		p.applied = s.cl.attrs.take(msg.streamID)
	}
	err := s.checkStreamAttrs(msg)
	if err == nil {
		s.clm.AttrEntries.WithLabelValues("logged").Inc()
		return p
	}
	err = fmt.Errorf("%w: partition %d sequence %d: %v", errStreamEntry, msg.logPart, msg.logSeq, err)
	s.clm.AttrEntries.WithLabelValues("malformed").Inc()
	s.rejLog.log(s.log, "stream", msg.device, "cluster mode: skipped a malformed attribute entry of the stream", err)
	p.rej = &batchview.Rejection{Reason: batchview.ReasonMalformed, Detail: err.Error()}
	if p.applied != nil {
		p.applied <- err
		p.applied = nil
	}
	return p
}

// checkStreamAttrs says why a stream entry is not an attribute version
// to apply: an unknown kind, a payload that does not decode within the
// table's limits, attributes the table refuses, or an effective time off
// the engine's bucket boundaries.
func (s *Server) checkStreamAttrs(msg inMsg) error {
	if msg.streamKind != natslog.KindAttrs {
		return fmt.Errorf("unknown entry kind %.32q", msg.streamKind)
	}
	if s.attrs == nil {
		return errors.New("the hub keeps no attribute table")
	}
	v, err := attrs.DecodeVersion(msg.payload, s.attrs.Limits())
	if err != nil {
		return err
	}
	if err := s.attrs.Limits().Validate(v.Attrs); err != nil {
		return err
	}
	if s.agg != nil {
		if res := int64(s.agg.eng.Options().Resolution); res > 0 && v.From%res != 0 {
			return fmt.Errorf("effective_from %d is not on a boundary of the engine's resolution %v", v.From, time.Duration(res))
		}
	}
	return nil
}
