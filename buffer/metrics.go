package buffer

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// collector reports a store's streams, summed, as Prometheus metrics. It
// reads positions at scrape time, so the hot path pays nothing for it.
type collector struct {
	s                                   *Store
	depth, bytes, oldest, streams       *prometheus.Desc
	appended, acked, dropped, gapCount  *prometheus.Desc
	diskFree, diskReserve, diskLimited  *prometheus.Desc
	diskRefused, diskDropping, reclaims *prometheus.Desc
}

func newCollector(s *Store) *collector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("edgeflow_buffer_"+name, help, nil, nil)
	}
	return &collector{
		s:            s,
		depth:        d("depth_events", "Events held (appended, not yet acknowledged or dropped)."),
		bytes:        d("bytes", "Bytes of event blocks held."),
		oldest:       d("oldest_unacked_age_seconds", "Age of the oldest held block (0 when empty)."),
		streams:      d("streams", "Streams loaded."),
		appended:     d("appended_events_total", "Events appended since the store was opened."),
		acked:        d("acked_events_total", "Events acknowledged since the store was opened."),
		dropped:      d("dropped_events_total", "Events dropped (bounds, age, corruption) since the store was opened; each drop is reported as a gap."),
		gapCount:     d("pending_gaps", "Dropped ranges not yet covered by an acknowledgement."),
		diskFree:     d("disk_free_bytes", "Free space on the buffer's filesystem (-1: unknown)."),
		diskReserve:  d("disk_reserve_bytes", "Free space the buffer keeps for its own writes; below it appends get the full policy (0: guard off)."),
		diskLimited:  d("disk_limited", "1 while free space is below the reserve and appends get the full policy."),
		diskRefused:  d("disk_refused_appends_total", "Appends refused (or given up waiting) because the filesystem was short of space."),
		diskDropping: d("disk_dropping_appends_total", "Appends that dropped the oldest events (gaps, reason disk_full) because the filesystem was short of space."),
		reclaims:     d("disk_reclaims_total", "Passes that compacted the deleted blocks of empty streams away while the filesystem was short of space."),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.depth, c.bytes, c.oldest, c.streams, c.appended, c.acked, c.dropped, c.gapCount,
		c.diskFree, c.diskReserve, c.diskLimited, c.diskRefused, c.diskDropping, c.reclaims} {
		ch <- d
	}
	c.s.syncs.Describe(ch)
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	c.s.mu.Lock()
	streams := make([]*Stream, 0, len(c.s.streams))
	for _, st := range c.s.streams {
		streams = append(streams, st)
	}
	c.s.mu.Unlock()
	var depth, appended, acked, dropped uint64
	var bytes int64
	gaps := 0
	oldest := int64(0)
	for _, st := range streams {
		s := st.Stats()
		depth += s.Depth
		bytes += s.Bytes
		appended += s.Appended
		acked += s.AckedTotal
		dropped += s.Dropped
		gaps += s.Gaps
		if s.OldestMs > 0 && (oldest == 0 || s.OldestMs < oldest) {
			oldest = s.OldestMs
		}
	}
	age := 0.0
	if oldest > 0 {
		age = max(0, c.s.opts.Now().Sub(time.UnixMilli(oldest)).Seconds())
	}
	g := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	k := func(d *prometheus.Desc, v uint64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	g(c.depth, float64(depth))
	g(c.bytes, float64(bytes))
	g(c.oldest, age)
	g(c.streams, float64(len(streams)))
	g(c.gapCount, float64(gaps))
	k(c.appended, appended)
	k(c.acked, acked)
	k(c.dropped, dropped)
	ds := c.s.DiskStatus()
	limited := 0.0
	if ds.Limited {
		limited = 1
	}
	g(c.diskFree, float64(ds.FreeBytes))
	g(c.diskReserve, float64(ds.ReserveBytes))
	g(c.diskLimited, limited)
	k(c.diskRefused, ds.RefusedAppends)
	k(c.diskDropping, ds.DroppedAppends)
	k(c.reclaims, ds.Reclaims)
	c.s.syncs.Collect(ch)
}
