package registry

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// backlogAges are the thresholds of edgeflow_hub_devices_backlogged: how
// old a device's oldest unsent event is.
var backlogAges = []struct {
	label string
	d     time.Duration
}{{"1m", time.Minute}, {"10m", 10 * time.Minute}, {"1h", time.Hour}}

// FleetCollector exports what the registry knows of the fleet's backlogs
// and gaps, computed when scraped (one pass over the devices under the
// registry's read lock), so that alerts need no per-device series.
type FleetCollector struct {
	reg *Registry
	now func() time.Time

	backlog, oldest, backlogged, gaps *prometheus.Desc
}

// NewFleetCollector returns the collector of reg's fleet gauges
// (edgeflow_hub_fleet_backlog_events, ..._fleet_backlog_oldest_seconds,
// ..._devices_backlogged, ..._gap_events); now is the hub's clock, against
// which backlog ages are measured.
func NewFleetCollector(reg *Registry, now func() time.Time) *FleetCollector {
	name := func(n string) string { return prometheus.BuildFQName("edgeflow", "hub", n) }
	return &FleetCollector{reg: reg, now: now,
		backlog: prometheus.NewDesc(name("fleet_backlog_events"), "Events the devices last reported holding, not yet acknowledged, summed over devices.", nil, nil),
		oldest: prometheus.NewDesc(name("fleet_backlog_oldest_seconds"),
			"Age of the oldest unsent event any device reported (device time corrected by the device's clock offset); 0 when no device reports a backlog.", nil, nil),
		backlogged: prometheus.NewDesc(name("devices_backlogged"), "Devices whose oldest unsent event is older than the label's age.", []string{"over"}, nil),
		gaps:       prometheus.NewDesc(name("gap_events"), "Events lost for good, over all streams: reported dropped by the agents (buffer bounds, corruption, batches rejected whole) or refused one by one by the hub.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *FleetCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.backlog
	ch <- c.oldest
	ch <- c.backlogged
	ch <- c.gaps
}

// Collect implements prometheus.Collector.
func (c *FleetCollector) Collect(ch chan<- prometheus.Metric) {
	now := c.now().UnixNano()
	var events, gaps uint64
	var oldest time.Duration
	over := make([]int, len(backlogAges))
	c.reg.mu.RLock()
	for _, d := range c.reg.devices {
		for _, s := range d.Streams {
			gaps += s.Gaps.Count()
		}
		if d.Backlog.Events == 0 {
			continue
		}
		events += d.Backlog.Events
		if d.Backlog.OldestNs == 0 {
			continue
		}
		age := time.Duration(now - (d.Backlog.OldestNs + d.clockInfo().OffsetNs))
		oldest = max(oldest, age)
		for i, a := range backlogAges {
			if age > a.d {
				over[i]++
			}
		}
	}
	c.reg.mu.RUnlock()
	ch <- prometheus.MustNewConstMetric(c.backlog, prometheus.GaugeValue, float64(events))
	ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, oldest.Seconds())
	for i, a := range backlogAges {
		ch <- prometheus.MustNewConstMetric(c.backlogged, prometheus.GaugeValue, float64(over[i]), a.label)
	}
	ch <- prometheus.MustNewConstMetric(c.gaps, prometheus.GaugeValue, float64(gaps))
}
