package hub

import (
	"fmt"
	"time"

	"edgeflow/aggregate"
	"edgeflow/hub/batchview"
	"edgeflow/hub/hublog"
	"edgeflow/internal/lograte"
	"edgeflow/wire"
)

// Streams per device. A stream is one agent buffer incarnation; a device
// re-flashed or reset starts a new one. Each stream costs the hub dedup
// state (a ranges key), a registry entry and an engine stream, so the
// committer bounds them per device (Options.MaxStreamsPerDevice): a batch
// that would open one more is answered RETRY_LATER too_many_streams,
// nothing of it stored. A stream with no accepted batch for
// Options.StreamIdleExpiry (hub clock) is retired: the committer logs an
// hublog.KindRetire in the same transaction that deletes the stream's ranges
// key, and the applier removes the stream from the registry and from the
// consumers that keep streams (StreamRetirer). A replay or a rebuild of
// the log thus reaches the same state, and the device may open a new
// stream in its place.
//
// The cost of retirement: a batch of a retired stream that arrives after
// it (an agent silent for longer than the expiry that still holds batches
// the hub applied but whose ack it never got) opens the stream again and
// is applied again. The expiry's default (a week) and minimum (an hour)
// keep that to agents gone far longer than any link outage.

// StreamRetirer is implemented by Consumers that keep per-stream state.
// The hub calls RetireStream, in log order live and in replay, when it
// retires a stream after Options.StreamIdleExpiry without a batch; the
// same (device, stream) may later start again as a new stream. Consumers
// without per-stream state need not implement it.
type StreamRetirer interface {
	RetireStream(device string, stream wire.StreamID)
}

// retireScanEvery is how often (hub clock) the committer looks through
// every stream for expired ones; a device at its bound has its own
// streams checked at once, whenever it asks for a new one.
const retireScanEvery = time.Minute

// streamCap is the committer's count of each device's streams, the time
// of its last expiry scan, and the limiter of its log line about devices
// at their bound.
type streamCap struct {
	byDevice map[string]map[wire.StreamID]*hublog.DedupState
	lastScan int64
	log      lograte.Limiter
}

// initStreams builds the per-device index of the loaded dedup state. A
// stream stored before last-seen times were kept counts as seen now, so
// it is retired one expiry after the upgrade at the earliest.
func (c *committer) initStreams(nowNs int64) {
	c.cap.byDevice = map[string]map[wire.StreamID]*hublog.DedupState{}
	c.cap.log.Every = c.opts.RejectLogInterval
	for k, st := range c.streams {
		if st.LastSeenNs == 0 {
			st.LastSeenNs = nowNs
		}
		c.indexStream(k, st)
	}
	c.m.streams.Set(float64(len(c.streams)))
}

// indexStream adds a stream to its device's index.
func (c *committer) indexStream(k hublog.StreamKey, st *hublog.DedupState) {
	ids := c.cap.byDevice[k.Device]
	if ids == nil {
		ids = map[wire.StreamID]*hublog.DedupState{}
		c.cap.byDevice[k.Device] = ids
	}
	ids[k.ID] = st
}

// openStream records a stream the committer accepted a first batch of.
func (c *committer) openStream(k hublog.StreamKey, st *hublog.DedupState) {
	c.streams[k] = st
	c.indexStream(k, st)
	c.m.streams.Set(float64(len(c.streams)))
}

// admitStream decides whether p, the first batch of a stream the
// committer does not know, may open it: a device at its bound is refused
// for now, with the time until its oldest stream expires.
func (c *committer) admitStream(p *pending) bool {
	ids := c.cap.byDevice[p.device]
	if len(ids) < c.opts.MaxStreamsPerDevice {
		return true
	}
	oldest := int64(0)
	for _, st := range ids {
		if oldest == 0 || st.LastSeenNs < oldest {
			oldest = st.LastSeenNs
		}
	}
	p.retryAfterNs = max(oldest+int64(c.opts.StreamIdleExpiry)-p.serverTimeNs, int64(time.Second))
	if ok, n := c.cap.log.Allow(time.Unix(0, p.serverTimeNs)); ok {
		c.opts.Logger.Warn("device at its bound of streams: batches opening a new stream are answered retry-later until one is retired",
			"device", p.device, "streams", len(ids), "max_streams_per_device", c.opts.MaxStreamsPerDevice,
			"oldest_expires_in", time.Duration(p.retryAfterNs).Round(time.Second), "suppressed_since_last", n)
	}
	p.rej = &batchview.Rejection{Reason: batchview.ReasonTooManyStreams, Detail: fmt.Sprintf("device already holds %d streams (max-streams-per-device %d); a stream is retired after %v without a batch",
		len(ids), c.opts.MaxStreamsPerDevice, c.opts.StreamIdleExpiry)}
	return false
}

// withRetirements returns group with the retirements now due in front:
// every expired stream once a scan is due, else the expired streams of
// the devices in group that ask for a new stream at their bound. The
// committer forgets each retired stream here, so the group's batches are
// classified without it; its ranges key is deleted with the entry.
func (c *committer) withRetirements(group []*pending) []*pending {
	now := c.opts.Now().UnixNano()
	var due []hublog.StreamKey
	// A stream with a batch in this group is not idle, whatever its time.
	busy := map[hublog.StreamKey]bool{}
	for _, p := range group {
		if p.kind == hublog.KindBatch {
			busy[hublog.StreamKey{Device: p.device, ID: p.stream}] = true
		}
	}
	if now-c.cap.lastScan >= int64(retireScanEvery) {
		c.cap.lastScan = now
		for k, st := range c.streams {
			if !busy[k] && c.expired(st, now) {
				due = append(due, k)
			}
		}
	} else {
		for _, p := range group {
			ids := c.cap.byDevice[p.device]
			if p.kind != hublog.KindBatch || p.rej != nil || len(ids) < c.opts.MaxStreamsPerDevice || ids[p.stream] != nil {
				continue
			}
			for id, st := range ids {
				if !busy[hublog.StreamKey{Device: p.device, ID: id}] && c.expired(st, now) {
					due = append(due, hublog.StreamKey{Device: p.device, ID: id})
				}
			}
		}
	}
	if len(due) == 0 {
		return group
	}
	out := make([]*pending, 0, len(due)+len(group))
	for _, k := range due {
		if c.streams[k] == nil {
			continue // listed twice in this group
		}
		c.forgetStream(k)
		out = append(out, &pending{kind: hublog.KindRetire, device: k.Device, stream: k.ID, serverTimeNs: now})
	}
	if len(out) > 0 {
		c.opts.Logger.Info("retired streams idle for stream-idle-expiry", "streams", len(out),
			"first_device", out[0].device, "first_stream", out[0].stream, "stream_idle_expiry", c.opts.StreamIdleExpiry)
	}
	return append(out, group...)
}

// expired reports whether a stream has had no accepted batch for the
// expiry as of nowNs.
func (c *committer) expired(st *hublog.DedupState, nowNs int64) bool {
	return nowNs-st.LastSeenNs >= int64(c.opts.StreamIdleExpiry)
}

// forgetStream drops a retired stream from the dedup state.
func (c *committer) forgetStream(k hublog.StreamKey) {
	delete(c.streams, k)
	if ids := c.cap.byDevice[k.Device]; ids != nil {
		delete(ids, k.ID)
		if len(ids) == 0 {
			delete(c.cap.byDevice, k.Device)
		}
	}
	c.m.streams.Set(float64(len(c.streams)))
	c.m.streamsRetired.Inc()
}

// retireKVs are a retirement's keys: its log entry, and the deletion of
// the stream's ranges key in the same transaction.
func retireKVs(p *pending) []kv {
	return []kv{{k: hublog.WALKey(p.entry.Seq, p.serverTimeNs), v: p.entry.Encode()}, {k: hublog.RangesKey(p.device, p.stream), del: true}}
}

// retireStream applies a logged retirement to the registry and the
// consumers that keep streams.
func (a *applier) retireStream(e *hublog.Entry) {
	a.reg.RetireStream(e.Device, e.Stream)
	for _, c := range a.consumers {
		if r, ok := c.(StreamRetirer); ok {
			a.safeCall(c.Name(), func() { r.RetireStream(e.Device, e.Stream) })
		}
	}
}

// RetireStream implements StreamRetirer: the engine forgets the stream.
func (a *aggregates) RetireStream(device string, stream wire.StreamID) {
	a.eng.RetireStream(device, aggregate.StreamID(stream))
}
