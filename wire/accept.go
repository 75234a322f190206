package wire

import (
	"math"
	"time"
	"unicode/utf8"

	"edgeflow/wire/wirepb"
)

// The one definition of an acceptable event. The hub applies it to every
// event of a batch (refusing the events that fail it one by one, see
// Ack.refused) and the agent applies it at ingest, before anything is
// stored, to the event as it will stamp it: so an event the agent answered
// with 2xx is one the hub applies.

// Event times the hub accepts for a trusted event, corrected by its
// offset: [MinEventTimeNs, MaxEventTimeNs), 2000-01-01 to 2200-01-01 UTC,
// Unix ns. An UNTRUSTED event's time is not bounded: it is kept as the
// device said and excluded from windows.
const (
	MinEventTimeNs int64 = 946_684_800_000_000_000
	MaxEventTimeNs int64 = 7_258_118_400_000_000_000
)

// Device clock readings an agent takes as an event's ts, before any
// correction: [MinDeviceTimeNs, MaxDeviceTimeNs), 1971-01-01 to
// 2201-01-01 UTC, Unix ns. Wider than the trusted range: a clock that is
// not synced (years off after a power loss) still stamps events the hub
// keeps as UNTRUSTED, and a trusted one is then held to the range above.
const (
	MinDeviceTimeNs int64 = 31_536_000_000_000_000
	MaxDeviceTimeNs int64 = 7_289_654_400_000_000_000
)

// DeviceTimeOK reports whether t lies in [MinDeviceTimeNs,
// MaxDeviceTimeNs). It takes a time.Time, not ns, because a ts outside the
// range (year 1 or 9999) has no int64 of Unix ns.
func DeviceTimeOK(t time.Time) bool {
	return !t.Before(time.Unix(0, MinDeviceTimeNs)) && t.Before(time.Unix(0, MaxDeviceTimeNs))
}

// MaxTimeMethod is the largest TimeMethod this build knows; an event with
// a larger one is refused.
const MaxTimeMethod = wirepb.TimeMethod_TIME_METHOD_DEVICE

// Fault says why an event is not acceptable (FaultNone: it is). Its
// Reason is the refusal class the hub counts and names in acks and gaps;
// its Field the event field at fault, as ingest names it.
type Fault uint8

// Event faults.
const (
	FaultNone        Fault = iota
	FaultValue             // value is NaN or infinite
	FaultMetric            // metric is empty, too long or not valid UTF-8
	FaultTag               // a tag key or value is too long or not valid UTF-8
	FaultMethod            // time method unknown to this build
	FaultUncertainty       // negative time uncertainty
	FaultTime              // trusted corrected time outside [2000, 2200)
)

// Reason is the fault's refusal class: bad_value, bad_metric, bad_tag,
// bad_method or bad_time (an uncertainty is part of the time), as the
// hub's rejection reasons name them.
func (f Fault) Reason() string {
	switch f {
	case FaultNone:
		return ""
	case FaultValue:
		return "bad_value"
	case FaultMetric:
		return "bad_metric"
	case FaultTag:
		return "bad_tag"
	case FaultMethod:
		return "bad_method"
	}
	return "bad_time"
}

// Field is the event field at fault: value, metric, tags, method,
// uncertainty or ts.
func (f Fault) Field() string {
	switch f {
	case FaultValue:
		return "value"
	case FaultMetric:
		return "metric"
	case FaultTag:
		return "tags"
	case FaultMethod:
		return "method"
	case FaultUncertainty:
		return "uncertainty"
	case FaultTime:
		return "ts"
	}
	return ""
}

// SaneTime reports whether ns lies in [MinEventTimeNs, MaxEventTimeNs).
func SaneTime(ns int64) bool { return ns >= MinEventTimeNs && ns < MaxEventTimeNs }

// CorrectedTimeOK reports whether a trusted clock's reading, corrected by
// its offset, is a SaneTime. The raw reading may be anywhere a device
// clock goes (1970 after a power loss is common: the offset repairs it);
// both are bounded first so the sum cannot wrap around into the range.
func CorrectedTimeOK(rawNs, offsetNs int64) bool {
	return rawNs >= -MaxEventTimeNs && rawNs <= MaxEventTimeNs && offsetNs >= -MaxEventTimeNs && offsetNs <= MaxEventTimeNs &&
		SaneTime(rawNs+offsetNs)
}

// CheckEventValues checks an event's value, metric length and time fields
// (the strings' contents are CheckString's): the first fault, or
// FaultNone. It allocates nothing, as the hub runs it on every event.
func CheckEventValues(value float64, metricLen int, method wirepb.TimeMethod, uncertaintyNs, deviceTimeNs, offsetNs int64) Fault {
	switch {
	case math.IsNaN(value) || math.IsInf(value, 0):
		return FaultValue
	case metricLen == 0:
		return FaultMetric
	case method < 0 || method > MaxTimeMethod:
		return FaultMethod
	case uncertaintyNs < 0:
		return FaultUncertainty
	case method != wirepb.TimeMethod_TIME_METHOD_UNTRUSTED && !CorrectedTimeOK(deviceTimeNs, offsetNs):
		return FaultTime
	}
	return FaultNone
}

// CheckString reports whether a metric name, tag key or tag value is
// acceptable: valid UTF-8 of at most lim.MaxStringBytes bytes.
func CheckString(s string, lim Limits) bool {
	return len(s) <= lim.withDefaults().MaxStringBytes && utf8.ValidString(s)
}

// CheckEvent checks a whole event as the hub will take it: its strings,
// tag count, value and time fields. It is the agent's check at ingest, on
// the event as stamped.
func CheckEvent(ev *wirepb.Event, lim Limits) Fault {
	lim = lim.withDefaults()
	if !CheckString(ev.Metric, lim) {
		return FaultMetric
	}
	if len(ev.Tags) > lim.MaxTags {
		return FaultTag
	}
	for _, t := range ev.Tags {
		if !CheckString(t.GetKey(), lim) || !CheckString(t.GetValue(), lim) {
			return FaultTag
		}
	}
	return CheckEventValues(ev.Value, len(ev.Metric), ev.Method, ev.UncertaintyNs, ev.DeviceTimeNs, ev.OffsetNs)
}
