package hub

import (
	"fmt"
	"log/slog"
	"math"
	"time"

	"edgeflow/aggregate"
	"edgeflow/hub/hublog"
	"edgeflow/hub/rules"
	"edgeflow/internal/lograte"
	"edgeflow/wire/wirepb"
)

// RulesConsumerName is the name of the rules evaluator's state in the
// hub's checkpoint.
const RulesConsumerName = "rules"

// alertsConsumer feeds the rules evaluator from the applier, after the
// engine (it is appended to the consumers behind it): each batch's events,
// then the engine updates that batch or tick produced, read from a
// subscription drained within the same call, so the evaluator sees the
// same inputs in the same order live, in replay and after a restore.
type alertsConsumer struct {
	ev   *rules.Evaluator
	bc   rules.Broadcast // live alert revisions for /v1/stream
	eng  *aggregate.Engine
	sub  *aggregate.Subscription
	log  *slog.Logger
	rate rateLog
	now  time.Time // processing time of the tick being applied (the evaluator's Clock)
	evs  []aggregate.Event
	tags []aggregate.Tag
	ups  []aggregate.Update
	out  *alertLog // nil without Options.AlertOutputs
}

// newRules builds the evaluator of Options.Rules over the engine and
// appends it to the consumers; nothing without rules.
func (s *Server) newRules() error {
	if len(s.opts.Rules) == 0 {
		if len(s.opts.AlertOutputs) > 0 {
			return fmt.Errorf("%w: AlertOutputs: alert outputs need rules", ErrInvalidOptions)
		}
		return nil
	}
	if s.agg == nil {
		return fmt.Errorf("%w: Rules: rules need the aggregate engine (aggregate.enabled)", ErrInvalidOptions)
	}
	c, err := newAlertsConsumer(s.agg.eng, &s.opts)
	if err != nil {
		return err
	}
	if c.out, err = s.newAlertLog(); err != nil {
		return err
	}
	s.rules = c
	s.opts.Consumers = append(s.opts.Consumers, c)
	return checkConsumerNames(s.opts.Consumers)
}

// newAlertsConsumer builds the evaluator of opts.Rules over eng (the hub's,
// or a rebuild's).
func newAlertsConsumer(eng *aggregate.Engine, opts *Options) (*alertsConsumer, error) {
	c := &alertsConsumer{eng: eng, log: opts.Logger,
		rate: rateLog{lim: lograte.Limiter{Every: time.Minute}, now: opts.Now}}
	ev, err := rules.New(opts.Rules, rules.Options{
		Clock:           func() time.Time { return c.now },
		AllowedLateness: opts.Aggregate.AllowedLateness,
		Horizon:         opts.Aggregate.LateHorizon,
		OnAlert: func(ch []rules.Alert) {
			c.bc.Publish(ch)
			if c.out != nil {
				c.out.append(ch)
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("%w: Rules: %w", ErrInvalidOptions, err)
	}
	c.ev = ev
	// The applier drains the subscription after every Apply and tick, so
	// it holds at most one call's updates (bounded by the engine).
	c.sub = eng.Subscribe(1 << 16)
	return c, nil
}

// Name implements Consumer.
func (c *alertsConsumer) Name() string { return RulesConsumerName }

// Apply implements Consumer.
func (c *alertsConsumer) Apply(b *AppliedBatch) {
	c.evs, c.tags = c.evs[:0], c.tags[:0]
	for i := range b.Events {
		e := &b.Events[i]
		lo := len(c.tags)
		for _, t := range e.Tags {
			c.tags = append(c.tags, aggregate.Tag{Key: t.Key, Value: t.Value})
		}
		c.evs = append(c.evs, aggregate.Event{Seq: e.Seq, Metric: e.Metric, Value: e.Value, Time: e.EventTimeNs,
			Untrusted: e.Method == wirepb.TimeMethod_TIME_METHOD_UNTRUSTED, Tags: c.tags[lo:len(c.tags):len(c.tags)]})
	}
	c.ev.ObserveBatch(&aggregate.Batch{Seq: b.WALSeq, Device: b.Device, ServerTime: b.ServerTime.UnixNano(), Events: c.evs})
	c.feed()
}

// Tick implements Ticker: offline rules run on logged ticks.
func (c *alertsConsumer) Tick(now time.Time) {
	c.now = now
	c.feed()
	c.ev.Tick()
}

// feed hands the engine's pending updates to the evaluator.
func (c *alertsConsumer) feed() {
	c.ups = c.ups[:0]
	for len(c.sub.Updates()) > 0 {
		c.ups = append(c.ups, <-c.sub.Updates())
	}
	if err := c.sub.Err(); err != nil {
		c.rate.log(c.log, "rules", "", "rules lost the engine's updates", err)
	}
	if err := c.ev.Feed(c.eng, c.ups); err != nil {
		c.rate.log(c.log, "rules", "", "window queries of threshold rules failed", err)
	}
}

// Snapshot implements Consumer.
func (c *alertsConsumer) Snapshot() ([]byte, error) { return c.ev.MarshalState() }

// Restore implements Consumer.
func (c *alertsConsumer) Restore(b []byte) error { return c.ev.RestoreState(b) }

// Alerts lists the rules' alerts (GET /v1/alerts); none when the hub has
// no rules.
func (s *Server) Alerts(f rules.Filter) ([]rules.Alert, string, error) {
	if s.rules == nil {
		return nil, "", nil
	}
	return s.rules.ev.Query(f)
}

// SubscribeAlerts returns a live feed of alert revisions (an "alert"
// event on /v1/stream), or nil without rules.
func (s *Server) SubscribeAlerts(buffer int) *rules.AlertSubscription {
	if s.rules == nil {
		return nil
	}
	return s.rules.bc.Subscribe(buffer)
}

// RulesEvaluator returns the evaluator, or nil without rules.
func (s *Server) RulesEvaluator() *rules.Evaluator {
	if s.rules == nil {
		return nil
	}
	return s.rules.ev
}

// statusObserver is a Consumer that also follows devices' status
// messages: the connection status as the registry holds it after each
// logged status, and the status itself (its buffer figures).
type statusObserver interface {
	ObserveStatus(device string, online bool, at time.Time, st *wirepb.Status)
}

// statusConsumers hands a logged status to the consumers that follow
// device status (the rules' offline and buffer rules), in log order.
func (a *applier) statusConsumers(e *hublog.Entry, st *wirepb.Status) {
	for _, c := range a.consumers {
		if so, ok := c.(statusObserver); ok {
			info, _ := a.reg.Get(e.Device)
			a.safeCall(c.Name(), func() { so.ObserveStatus(e.Device, info.Online, time.Unix(0, e.ServerTimeNs), st) })
		}
	}
}

// ObserveStatus implements statusObserver: the connection status feeds
// offline rules, and an online status's buffer figures feed buffer rules
// (an offline status's are left out: a last will's were taken when its
// connection began). A status without them (an agent that does not
// report its buffer) changes nothing for buffer rules.
func (c *alertsConsumer) ObserveStatus(device string, online bool, at time.Time, st *wirepb.Status) {
	c.ev.Connection(device, online, at)
	if bs, ok := bufferStatus(st, at); ok {
		c.ev.Buffer(device, bs)
	}
}

// bufferStatus is the rules' view of a status's buffer figures; false
// when the status is offline or has none. A fill rate that is not a
// finite number counts as none.
func bufferStatus(st *wirepb.Status, at time.Time) (rules.BufferStatus, bool) {
	b := st.GetBuffer()
	if b == nil || !st.GetOnline() {
		return rules.BufferStatus{}, false
	}
	rate := b.GetFillRate()
	if math.IsNaN(rate) || math.IsInf(rate, 0) {
		rate = 0
	}
	return rules.BufferStatus{UsedBytes: b.GetUsedBytes(), CapacityBytes: b.GetCapacityBytes(), FillRate: rate, At: at}, true
}
