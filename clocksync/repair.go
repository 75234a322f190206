package clocksync

import (
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// Stamp is what the agent records about an event's time at capture: the
// raw clocks, and the correction if the clock was trusted then.
type Stamp struct {
	// DeviceTime is the device wall clock at capture.
	DeviceTime time.Time
	// Mono is the monotonic time since boot at capture.
	Mono time.Duration
	// BootID is the boot Mono counts from.
	BootID string
	// Correction holds the capture-time correction, Method UNTRUSTED if
	// the clock was not trusted.
	Correction Correction
}

// Correction is a corrected event time and how far to trust it.
type Correction struct {
	// Time is the corrected event time; the raw device time when Method
	// is UNTRUSTED.
	Time time.Time
	// Offset is Time minus the device time (zero when UNTRUSTED).
	Offset time.Duration
	// Uncertainty is the half-width of the interval around Time that
	// holds the true time (zero when UNTRUSTED).
	Uncertainty time.Duration
	// Method says how Time was obtained.
	Method wirepb.TimeMethod
}

// Stamp reads the clocks for an event being captured now and corrects its
// time with the current estimate, if trusted and distinguishable from zero
// (see settle). It never blocks.
func (c *Clock) Stamp() Stamp {
	mono, wall, slack := c.read()
	st := Stamp{DeviceTime: wall, Mono: mono, BootID: c.boot, Correction: untrusted(wall)}
	m := c.model.Load()
	if m == nil {
		return st
	}
	if u := m.uncertainty(mono); u <= c.opts.MaxUncertainty {
		t := m.trueTime(mono)
		st.Correction = settle(Correction{
			Time:        time.Unix(0, t),
			Offset:      time.Duration(t - wall.UnixNano()),
			Uncertainty: u + slack,
			Method:      m.method,
		}, wall)
	}
	return st
}

// settle leaves a device time as it is when the correction cannot be told
// from zero (|Offset| <= Uncertainty): the clock is right within what the
// estimate knows, and moving its times by noise would move events stamped
// exactly on a window boundary into the previous window. The uncertainty
// then grows by the offset left out, so the interval still holds the true
// time. Method stays that of the estimate, which vouches for the clock.
func settle(cr Correction, deviceTime time.Time) Correction {
	if cr.Offset.Abs() > cr.Uncertainty {
		return cr
	}
	cr.Uncertainty += cr.Offset.Abs()
	cr.Time, cr.Offset = deviceTime, 0
	return cr
}

// StampEvent fills ev's time fields (device_time_ns, mono_ns, boot_id and
// the capture-time correction) for an event captured now.
func (c *Clock) StampEvent(ev *wirepb.Event) {
	st := c.Stamp()
	ev.DeviceTimeNs = st.DeviceTime.UnixNano()
	ev.MonoNs = int64(st.Mono)
	ev.BootId = st.BootID
	setCorrection(ev, st.Correction)
}

// Correct returns the corrected time of an event captured at device time
// deviceTime and monotonic time mono in boot bootID, from the current
// estimate. An event of this boot is re-timed through its monotonic time,
// so it is right even if it was captured before the clock was synced or
// before a wall-clock step; Method is then REPAIRED if it predates every
// sample of the fit, else the fit's method (NTP or HUB_SYNC). An event of
// another boot, one with an impossible monotonic time, or one whose
// uncertainty would exceed MaxUncertainty keeps its device time with
// Method UNTRUSTED.
func (c *Clock) Correct(deviceTime time.Time, mono time.Duration, bootID string) Correction {
	if bootID == "" || bootID != c.boot || mono < 0 {
		return untrusted(deviceTime)
	}
	now := c.opts.Mono()
	m := c.model.Load()
	if m == nil || mono > now+time.Second {
		return untrusted(deviceTime)
	}
	u := m.uncertainty(mono)
	if u > c.opts.MaxUncertainty {
		return untrusted(deviceTime)
	}
	t := m.trueTime(mono)
	method := m.method
	if mono < m.firstMono {
		method = wirepb.TimeMethod_TIME_METHOD_REPAIRED
	}
	return settle(Correction{
		Time:        time.Unix(0, t),
		Offset:      time.Duration(t - deviceTime.UnixNano()),
		Uncertainty: u,
		Method:      method,
	}, deviceTime)
}

// RepairEvent re-times ev if it was captured untrusted and can now be
// corrected through its monotonic time (same boot, trustworthy estimate):
// it sets offset_ns, uncertainty_ns and method REPAIRED and returns true.
// Events already corrected at capture are left alone, as are events that
// cannot be repaired (they stay UNTRUSTED). Call it when a batch is built.
func (c *Clock) RepairEvent(ev *wirepb.Event) bool {
	if ev.Method != wirepb.TimeMethod_TIME_METHOD_UNTRUSTED {
		return false
	}
	cr := c.Correct(time.Unix(0, ev.DeviceTimeNs), time.Duration(ev.MonoNs), ev.BootId)
	if cr.Method == wirepb.TimeMethod_TIME_METHOD_UNTRUSTED {
		return false
	}
	cr.Method = wirepb.TimeMethod_TIME_METHOD_REPAIRED
	setCorrection(ev, cr)
	return true
}

func untrusted(deviceTime time.Time) Correction {
	return Correction{Time: deviceTime, Method: wirepb.TimeMethod_TIME_METHOD_UNTRUSTED}
}

func setCorrection(ev *wirepb.Event, cr Correction) {
	ev.OffsetNs = int64(cr.Offset)
	ev.UncertaintyNs = int64(cr.Uncertainty)
	ev.Method = cr.Method
}

// StoredMethod reads an encoded wirepb.Event's time method without
// decoding the rest (proto3 omits the default, UNTRUSTED), so a retimer
// skips the events that need no repair (nearly all once the clock is
// synced) without unmarshalling them. ok is false for a malformed record.
func StoredMethod(rec []byte) (m wirepb.TimeMethod, ok bool) {
	for len(rec) > 0 {
		num, typ, n := protowire.ConsumeTag(rec)
		if n < 0 {
			return 0, false
		}
		rec = rec[n:]
		if num == wire.FieldEventMethod && typ == protowire.VarintType {
			v, n := protowire.ConsumeVarint(rec)
			if n < 0 {
				return 0, false
			}
			m, rec = wirepb.TimeMethod(v), rec[n:] // the last occurrence wins, as in proto
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, rec)
		if n < 0 {
			return 0, false
		}
		rec = rec[n:]
	}
	return m, true
}
