package simulator

import (
	"context"
	"sync/atomic"
	"time"
)

// Report is the fleet's load figures at one moment. Rates are over the
// last report interval; totals since the start.
type Report struct {
	Scenario string  `json:"scenario"`
	Phase    string  `json:"phase"` // run, drain; at the end drained, drain_timeout or interrupted
	Elapsed  float64 `json:"elapsed_s"`
	Devices  int     `json:"devices"`
	// Connected counts uplinks connected to the broker.
	Connected int `json:"connected"`
	// Appended, Published and Acked count events: appended to the
	// buffers, published (first sends), acknowledged by the hub.
	Appended  uint64 `json:"appended"`
	Published uint64 `json:"published"`
	Acked     uint64 `json:"acked"`
	// AppendRate, PublishRate, AckRate are events/s; PeakAckRate the
	// highest AckRate of any interval so far.
	AppendRate  float64 `json:"append_rate"`
	PublishRate float64 `json:"publish_rate"`
	AckRate     float64 `json:"ack_rate"`
	PeakAckRate float64 `json:"peak_ack_rate"`
	// Backlog is events appended and not yet acknowledged.
	Backlog uint64 `json:"backlog"`
	// Reconnects are the uplinks' reconnects within one agent life plus
	// the uplinks opened again after an outage, crash or power loss.
	Reconnects      uint64 `json:"reconnects"`
	ConnectFailures uint64 `json:"connect_failures"`
	Resent          uint64 `json:"batches_resent"`
	DuplicateAcks   uint64 `json:"duplicate_acks"`
	Rejected        uint64 `json:"rejected_batches"`
	AgentStarts     uint64 `json:"agent_starts"`
	PowerLosses     uint64 `json:"power_losses"`
	// AckLatency is append to hub ack, per event.
	AckLatency Quantiles `json:"ack_latency"`
	// AckLatencyRecent is AckLatency for the events acknowledged during
	// the last report interval: when in the run the slow ones came.
	AckLatencyRecent Quantiles `json:"ack_latency_recent"`
	// AckLatencySteady is AckLatency for the events appended after the
	// ramp-up and warm-up: the fleet's steady state.
	AckLatencySteady Quantiles `json:"ack_latency_steady"`
	// AckReturn is, per ack in the steady state, the time from the hub's
	// stamp on it (server_time_ns) to the device's uplink applying it: the
	// way back, broker and device included. Read it only when fleetsim and
	// the hub share a clock (one machine); AckLatencySteady less AckReturn
	// is roughly the way there and the hub's own time.
	AckReturn Quantiles `json:"ack_return"`
	// Visible is append to counted in the hub's aggregate, from sampled
	// probes in the steady state (with Options.HubURL).
	Visible *Visibility `json:"visible,omitempty"`
	// Catchup, for preloaded runs: the preloaded events and how fast
	// they were acknowledged after the uplinks started.
	Catchup *Catchup `json:"catchup,omitempty"`
}

// Catchup measures the drain of preloaded backlogs.
type Catchup struct {
	Events  uint64  `json:"events"`
	Acked   uint64  `json:"acked"`
	Seconds float64 `json:"seconds,omitempty"` // until all were acked
	Rate    float64 `json:"events_per_s,omitempty"`
}

func (f *Fleet) reportLoop(ctx context.Context, producing *atomic.Bool) {
	t := time.NewTicker(f.opts.ReportEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		phase := "run"
		if !producing.Load() {
			phase = "drain"
		}
		r := f.snapshot(phase)
		if f.opts.OnReport != nil {
			f.opts.OnReport(r)
		}
	}
}

// snapshot computes a report and remembers it for the next rates.
func (f *Fleet) snapshot(phase string) Report {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	r := Report{Scenario: f.sc.Name, Phase: phase, Elapsed: now.Sub(f.uplinkAt).Seconds(), Devices: len(f.devices),
		Appended: f.appended.Load(), Acked: f.acked.Load(), Backlog: f.backlog(),
		AgentStarts: f.agentStarts.Load(), PowerLosses: f.powerLosses.Load(), AckLatency: f.latency.Summary(),
		AckLatencySteady: f.steady.Summary(), AckReturn: f.ackReturn.Summary(), Visible: f.prober.summary()}
	r.AckLatencyRecent, f.lastLatency = f.latency.since(f.lastLatency)
	counters := map[string]float64{}
	if fams, err := f.reg.Gather(); err == nil {
		for _, mf := range fams {
			for _, m := range mf.GetMetric() {
				v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
				for _, lp := range m.GetLabel() {
					if lp.GetName() == "status" && lp.GetValue() != "duplicate" {
						v = 0
					}
				}
				counters[mf.GetName()] += v
			}
		}
	}
	r.Connected = int(counters["edgeflow_uplink_connected"])
	r.Published = uint64(counters["edgeflow_uplink_events_published_total"])
	r.Resent = uint64(counters["edgeflow_uplink_batches_resent_total"])
	r.DuplicateAcks = uint64(counters["edgeflow_uplink_batches_acked_total"])
	r.Rejected = uint64(counters["edgeflow_uplink_rejected_batches_total"])
	r.ConnectFailures = uint64(counters["edgeflow_uplink_connect_failures_total"])
	starts := f.uplinkStarts.Load()
	r.Reconnects = uint64(counters["edgeflow_uplink_reconnects_total"]) + starts - min(starts, uint64(len(f.devices)))
	if f.last.Phase != "" {
		if dt := r.Elapsed - f.last.Elapsed; dt > 0 {
			r.AppendRate = float64(r.Appended-f.last.Appended) / dt
			r.PublishRate = float64(r.Published-f.last.Published) / dt
			r.AckRate = float64(r.Acked-f.last.Acked) / dt
		}
	}
	r.PeakAckRate = max(f.last.PeakAckRate, r.AckRate)
	if tot := f.preloadTotal.Load(); tot > 0 {
		c := &Catchup{Events: tot, Acked: f.preloadAcked.Load()}
		if done := f.preloadDone.Load(); done > 0 {
			c.Seconds = time.Unix(0, done).Sub(f.uplinkAt).Seconds()
			c.Rate = float64(tot) / c.Seconds
		}
		r.Catchup = c
	}
	f.last = r
	return r
}
