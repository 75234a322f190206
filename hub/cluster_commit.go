package hub

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"edgeflow/hub/hublog"
)

// positionKVs returns, in cluster mode, the position key of each stream
// partition a group holds batches of, set to the group's last sequence of
// that partition. A partition's messages reach the committer in stream
// order (one decode worker per partition), so every earlier message of it
// is committed in this group or an earlier one, whatever its fate
// (logged, duplicate or rejected: its ack follows the commit). Without
// stream batches it returns nil.
func (c *committer) positionKVs(group []*pending) []kv {
	var last map[int]uint64
	for _, p := range group {
		if p.own != nil && last != nil {
			delete(last, p.own.part) // the ownership entry writes its own position
		}
		if p.logSeq == 0 || p.stale {
			continue
		}
		if last == nil {
			last = map[int]uint64{}
		}
		last[p.logPart] = max(last[p.logPart], p.logSeq)
	}
	out := make([]kv, 0, len(last))
	for part, seq := range last {
		out = append(out, kv{k: hublog.LogPositionKey(c.opts.NATS.Log.Stream, part), v: hublog.EncodeLogPosition(seq)})
	}
	return out
}

// showPositions sets the position gauge of the partitions of a committed
// group.
func (c *committer) showPositions(group []*pending) {
	if c.posGauge == nil {
		return
	}
	for _, p := range group {
		if p.logSeq == 0 || p.stale {
			continue
		}
		if p.logPart >= len(c.posGauges) {
			c.posGauges = append(c.posGauges, make([]prometheus.Gauge, p.logPart+1-len(c.posGauges))...)
		}
		g := c.posGauges[p.logPart]
		if g == nil {
			g = c.posGauge.WithLabelValues(strconv.Itoa(p.logPart))
			c.posGauges[p.logPart] = g
		}
		g.Set(float64(p.logSeq))
	}
}
