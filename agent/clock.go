package agent

import (
	"time"

	"google.golang.org/protobuf/proto"

	"edgeflow/clocksync"
	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// timekeeper is what the agent needs of a clock: a *clocksync.Clock, or a
// fixedClock when no time source is configured.
type timekeeper interface {
	Stamp() clocksync.Stamp
	RepairEvent(ev *wirepb.Event) bool
	Estimate() clocksync.Estimate
}

// fixedClock stamps events with the raw device clock and one method:
// DEVICE when the operator trusts the device clock (GPS, a good RTC),
// UNTRUSTED otherwise. It never repairs anything.
type fixedClock struct {
	method wirepb.TimeMethod
	boot   string
	wall   func() time.Time
	mono   func() time.Duration
}

func newFixedClock(trusted bool, wall func() time.Time) *fixedClock {
	c := &fixedClock{method: wirepb.TimeMethod_TIME_METHOD_UNTRUSTED, wall: wall, mono: clocksync.MonoNow}
	if trusted {
		c.method = wirepb.TimeMethod_TIME_METHOD_DEVICE
	}
	if id, err := clocksync.ReadBootID(); err == nil {
		c.boot = id
	} else {
		c.boot = clocksync.RandomBootID()
	}
	return c
}

func (c *fixedClock) Stamp() clocksync.Stamp {
	w := c.wall()
	return clocksync.Stamp{DeviceTime: w, Mono: c.mono(), BootID: c.boot,
		Correction: clocksync.Correction{Time: w, Method: c.method}}
}

func (c *fixedClock) RepairEvent(*wirepb.Event) bool { return false }

func (c *fixedClock) Estimate() clocksync.Estimate {
	return clocksync.Estimate{Method: c.method, Source: "device clock", Mono: c.mono()}
}

// retimer is the uplink's Retime: it repairs events stored UNTRUSTED that
// the clock can now re-time, and returns every other record as it is.
type retimer struct {
	clock timekeeper
	m     *metrics
}

func (r retimer) retime(rec []byte) ([]byte, error) {
	if m, ok := clocksync.StoredMethod(rec); ok && m != wirepb.TimeMethod_TIME_METHOD_UNTRUSTED {
		return rec, nil
	}
	var ev wirepb.Event
	if err := proto.Unmarshal(rec, &ev); err != nil {
		return nil, err
	}
	if !r.clock.RepairEvent(&ev) {
		r.m.sentUntrusted.Add(1)
		return rec, nil
	}
	if wire.CheckEvent(&ev, wire.Limits{}) != wire.FaultNone {
		// Repaired to a time the hub refuses (an event stamped 1985 while
		// the clock was unsynced): sent untrusted as stored, which the
		// hub keeps, rather than trusted and refused.
		r.m.unrepairable.Add(1)
		r.m.sentUntrusted.Add(1)
		return rec, nil
	}
	r.m.repaired.Add(1)
	return proto.Marshal(&ev)
}
