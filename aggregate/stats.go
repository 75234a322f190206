package aggregate

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Stats are the engine's counters and gauges.
type Stats struct {
	// Events counts events merged into partials.
	Events uint64
	// Untrusted counts events kept out of windows for an untrusted time.
	Untrusted uint64
	// Invalid counts NaN or infinite values dropped.
	Invalid uint64
	// Late counts events merged into windows that were already final.
	Late uint64
	// TooLate counts events beyond late_horizon, sent to the late log.
	TooLate uint64
	// FutureStamped counts events beyond server time + max_future_skew.
	FutureStamped uint64
	// SeriesDropped counts events of new series refused by max_series.
	SeriesDropped uint64
	// ReplaySkipped counts replayed events already in a stored partial.
	ReplaySkipped uint64
	// ForcedReleases counts merged-stream events released before the
	// watermark because max_pending was reached.
	ForcedReleases uint64
	// StoreErrors counts failed store reads and writes.
	StoreErrors uint64
	// Evicted and Reloaded count partials moved to and from the store.
	Evicted, Reloaded uint64
	// Downsampled counts stored partials merged into a coarser tier (and
	// deleted); RetentionDeleted counts stored partials of any tier
	// deleted for being older than partials_retention.
	Downsampled, RetentionDeleted uint64
	// PressureEvicted counts partials evicted before evict_after because
	// more than max_live_partials were live (they are in Evicted too).
	PressureEvicted uint64
	// QueryCacheHits and QueryCacheMisses count blocks of stored partials
	// that queries found decoded in the cache or had to read from the
	// store; QueryCachePartials is the partials the cache holds.
	QueryCacheHits, QueryCacheMisses uint64
	QueryCachePartials               int
	// SubscribersDropped counts subscriptions dropped for being slow.
	SubscribersDropped uint64
	// Quarantined counts events held in the quarantine for being beyond
	// future_horizon (they are in FutureStamped too); HeldForPartials those
	// held because max_live_partials partials were live.
	// QuarantineReleased counts held events that entered their windows
	// (or the late log) since; QuarantineDropped those dropped because
	// the quarantine was full. QuarantineHeld is a gauge.
	Quarantined, HeldForPartials, QuarantineReleased, QuarantineDropped uint64
	QuarantineHeld                                                      int
	// DeviceSeriesDropped counts the events of SeriesDropped refused by
	// max_series_per_device.
	DeviceSeriesDropped uint64
	// Series, Streams, ActiveStreams, LivePartials and Pending are gauges.
	Series, Streams, ActiveStreams, LivePartials, Pending int
	// Watermark is the hub watermark (zero before the first);
	// ProcessingTime the engine's processing time.
	Watermark, ProcessingTime time.Time
	// StreamNext and LateLogNext are the next offsets of the merged stream
	// and the late log.
	StreamNext, LateLogNext uint64
}

// Stats returns a consistent copy of the counters.
func (e *Engine) Stats() Stats {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.statsLocked()
}

// statsLocked is Stats with e.mu held.
func (e *Engine) statsLocked() Stats {
	c := e.stats
	s := Stats{
		Events: c.events, Untrusted: c.untrusted, Invalid: c.invalid, Late: c.late, TooLate: c.tooLate,
		FutureStamped: c.future, SeriesDropped: c.seriesDropped, ReplaySkipped: c.replaySkipped,
		ForcedReleases: c.forced, StoreErrors: c.storeErrors + e.queryStoreErrors.Load(), Evicted: c.evicted, Reloaded: c.reloaded,
		Downsampled: c.downsampled, RetentionDeleted: c.retentionDeleted, PressureEvicted: c.pressureEvicted,
		Series: len(e.series.list) - e.series.dead, Streams: e.liveStreams(), Pending: e.merged.count,
		StreamNext: e.merged.out.next, LateLogNext: e.lateLog.next,
		Quarantined: c.quarantined, HeldForPartials: c.heldPartials, QuarantineReleased: c.quarantineReleased,
		QuarantineDropped: c.quarantineDropped, QuarantineHeld: e.quarantine.len(), DeviceSeriesDropped: c.deviceSeriesDropped,
	}
	s.QueryCacheHits, s.QueryCacheMisses, s.QueryCachePartials = e.cache.stats()
	e.subs.mu.Lock()
	s.SubscribersDropped = e.subs.dropped
	e.subs.mu.Unlock()
	for i := range e.series.list {
		s.LivePartials += len(e.series.list[i].parts)
	}
	for i := range e.streams {
		if e.active(&e.streams[i]) {
			s.ActiveStreams++
		}
	}
	if e.clk.hasFinal {
		s.Watermark = ts(e.clk.final)
	}
	if e.clk.calced {
		s.ProcessingTime = ts(e.clk.proc)
	}
	return s
}

// StreamState is the watermark state of one stream (for /v1/devices).
type StreamState struct {
	Device string
	Stream StreamID
	// Watermark is the largest event time seen (capped); zero when none.
	Watermark time.Time
	// LastArrival is the server time of its last batch with events.
	LastArrival time.Time
	// Backlog: the last batch reported a backlog. Active: the stream holds
	// the hub watermark back.
	Backlog, Active bool
}

// Streams returns every stream's state, in first-seen order.
func (e *Engine) Streams() []StreamState {
	e.mu.RLock()
	defer e.mu.RUnlock()
	out := make([]StreamState, 0, len(e.streams))
	for i := range e.streams {
		st := &e.streams[i]
		if st.retired {
			continue
		}
		ss := StreamState{Device: st.device, Stream: st.id, Backlog: st.backlog, Active: e.active(st), LastArrival: ts(st.lastArrival)}
		if st.has {
			ss.Watermark = ts(st.wm)
		}
		out = append(out, ss)
	}
	return out
}

// Collector exports Stats as Prometheus metrics under namespace (e.g.
// "edgeflow_aggregate"); register it with the hub's registry.
func (e *Engine) Collector(namespace string) prometheus.Collector {
	return &collector{e: e, ns: namespace}
}

type collector struct {
	e  *Engine
	ns string

	mu    sync.Mutex
	last  Stats  // the last Stats read
	stale uint64 // scrapes that reported last
}

// stats reads the engine's Stats without waiting for its lock: while a
// query holds it and Apply waits for it, a scrape reports the previous
// values (counted as stale) rather than wait behind both.
func (c *collector) stats() (Stats, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.e.mu.TryRLock() {
		c.stale++
		return c.last, c.stale
	}
	c.last = c.e.statsLocked()
	c.e.mu.RUnlock()
	return c.last, c.stale
}

type metricVal struct {
	name, help string
	kind       prometheus.ValueType
	v          float64
}

func (c *collector) values() []metricVal {
	s, stale := c.stats()
	ctr, g := prometheus.CounterValue, prometheus.GaugeValue
	wm := 0.0
	if !s.Watermark.IsZero() {
		wm = float64(s.Watermark.UnixNano()) / 1e9
	}
	return []metricVal{
		{"events_total", "Events merged into partials.", ctr, float64(s.Events)},
		{"untrusted_events_total", "Events kept out of windows for an untrusted time.", ctr, float64(s.Untrusted)},
		{"invalid_events_total", "Events with NaN or infinite values dropped.", ctr, float64(s.Invalid)},
		{"late_events_total", "Events merged into already final windows.", ctr, float64(s.Late)},
		{"too_late_events_total", "Events beyond late_horizon, sent to the late log.", ctr, float64(s.TooLate)},
		{"future_stamped_events_total", "Events beyond server time + max_future_skew.", ctr, float64(s.FutureStamped)},
		{"series_dropped_events_total", "Events of new series refused by max_series or max_series_per_device.", ctr, float64(s.SeriesDropped)},
		{"device_series_dropped_events_total", "Events of new series refused by max_series_per_device.", ctr, float64(s.DeviceSeriesDropped)},
		{"quarantined_events_total", "Events held in the quarantine for being beyond future_horizon.", ctr, float64(s.Quarantined)},
		{"partials_limit_held_events_total", "Events held in the quarantine because max_live_partials partials were live.", ctr, float64(s.HeldForPartials)},
		{"quarantine_released_events_total", "Held events that entered their windows (or the late log).", ctr, float64(s.QuarantineReleased)},
		{"quarantine_dropped_events_total", "Held events dropped because the quarantine was full (quarantine_size).", ctr, float64(s.QuarantineDropped)},
		{"quarantine_events", "Events held in the quarantine.", g, float64(s.QuarantineHeld)},
		{"forced_releases_total", "Merged-stream events released early (max_pending).", ctr, float64(s.ForcedReleases)},
		{"store_errors_total", "Failed partial store reads and writes.", ctr, float64(s.StoreErrors)},
		{"evicted_partials_total", "Partials moved to the store.", ctr, float64(s.Evicted)},
		{"downsampled_partials_total", "Stored partials merged into a coarser downsample tier.", ctr, float64(s.Downsampled)},
		{"pressure_evicted_partials_total", "Final partials evicted before evict_after because max_live_partials were live.", ctr, float64(s.PressureEvicted)},
		{"retention_deleted_partials_total", "Stored partials deleted for being older than partials_retention.", ctr, float64(s.RetentionDeleted)},
		{"query_cache_hits_total", "Blocks of stored partials queries found decoded in the cache.", ctr, float64(s.QueryCacheHits)},
		{"query_cache_misses_total", "Blocks of stored partials queries read from the store.", ctr, float64(s.QueryCacheMisses)},
		{"query_cache_partials", "Decoded stored partials held by the query cache.", g, float64(s.QueryCachePartials)},
		{"subscribers_dropped_total", "Subscriptions dropped for being slow.", ctr, float64(s.SubscribersDropped)},
		{"series", "Distinct series.", g, float64(s.Series)},
		{"streams", "Known streams.", g, float64(s.Streams)},
		{"active_streams", "Streams holding the hub watermark back.", g, float64(s.ActiveStreams)},
		{"live_partials", "Partials held in memory.", g, float64(s.LivePartials)},
		{"pending_events", "Merged-stream events waiting for the watermark.", g, float64(s.Pending)},
		{"watermark_seconds", "Hub watermark, Unix seconds.", g, wm},
		{"stale_scrapes_total", "Scrapes that reported the engine's previous values because a query held the engine and ingest waited for it.", ctr, float64(stale)},
	}
}

func (c *collector) desc(m metricVal) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(c.ns, "", m.name), m.help, nil, nil)
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.values() {
		ch <- c.desc(m)
	}
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range c.values() {
		ch <- prometheus.MustNewConstMetric(c.desc(m), m.kind, m.v)
	}
}
