package batchview

import (
	"math"
	"slices"

	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// Sane bounds for trusted timestamps: wire's, 2000-01-01 to 2200-01-01 UTC.
const (
	MinTimeNs = wire.MinEventTimeNs
	MaxTimeNs = wire.MaxEventTimeNs
)

// maxMethod is the largest TimeMethod this build knows.
const MaxMethod = wire.MaxTimeMethod

// maxRefusedRuns bounds the runs of consecutive refused events one batch
// may have (each becomes a gap range of its stream and a range in the
// ack); a batch with more is rejected whole.
const MaxRefusedRuns = 32

// saneTime reports whether ns lies within the trusted bounds.
func SaneTime(ns int64) bool { return wire.SaneTime(ns) }

// ValidateBatch checks what can be checked without the stream's state.
// topicDevice is the device named by the topic.
func ValidateBatch(v *View, topicDevice string) error {
	if string(v.Device) != topicDevice {
		return Reject(ReasonDeviceMismatch, "payload device %q, topic device %q", v.Device, topicDevice)
	}
	if len(v.StreamID) != 16 {
		return Reject(ReasonStreamID, "stream id is %d bytes, want 16", len(v.StreamID))
	}
	n := v.Len()
	if n == 0 {
		return Reject(ReasonNoEvents, "batch has no events")
	}
	if v.FirstSeq == 0 {
		return Reject(ReasonFirstSeq, "first_seq is 0 (sequences start at 1)")
	}
	if v.FirstSeq > math.MaxUint64-uint64(n) {
		return Reject(ReasonSeqOverflow, "first_seq %d + %d events overflows", v.FirstSeq, n)
	}
	if err := validateSendTime(v); err != nil {
		return err
	}
	if err := validateGaps(v); err != nil {
		return err
	}
	return validateEvents(v)
}

// validateEvents checks every event and records the ones that fail in
// v.refused, so the others are applied: one bad event never costs its
// batch's good ones. Only a batch with more than maxRefusedRuns runs of
// refused events is rejected whole.
func validateEvents(v *View) error {
	if v.Columnar && v.badStrings == nil && ColumnsValid(&v.cols) {
		return nil
	}
	if v.Columnar {
		c := &v.cols
		for i := range v.Len() {
			f := CheckEvent(c.Value[i], len(c.Strings[c.Metric[i]]), wirepb.TimeMethod(int32(c.Method[i])), c.Uncertainty[i], c.Time[i], c.Offset[i])
			if f == wire.FaultNone && v.badStrings != nil {
				f = v.columnStringFault(i)
			}
			v.refuse(i, f)
		}
	} else {
		for i := range v.Events {
			e := &v.Events[i]
			f := e.fault
			if f == wire.FaultNone {
				f = CheckEvent(e.Value, len(e.Metric), e.Method, e.UncertaintyNs, e.DeviceTimeNs, e.OffsetNs)
			}
			v.refuse(i, f)
		}
	}
	if len(v.Refused) > MaxRefusedRuns {
		r := v.Refused[0]
		return Reject(Reason(r.Fault.Reason()), "%d runs of refused events, at most %d in one batch (the first: event %d, %s)", len(v.Refused), MaxRefusedRuns, r.Lo, r.Fault.Field())
	}
	return nil
}

// RefusedRun is a run of consecutive events of a batch, [lo, hi] by index,
// that the hub refuses for one fault.
type RefusedRun struct {
	Lo, Hi int
	Fault  wire.Fault
}

// refuse records that event i fails with fault f (FaultNone: it passes),
// extending the last run when it can. Events come in index order.
func (v *View) refuse(i int, f wire.Fault) {
	if f == wire.FaultNone {
		return
	}
	if n := len(v.Refused); n > 0 && v.Refused[n-1].Hi == i-1 && v.Refused[n-1].Fault == f {
		v.Refused[n-1].Hi = i
		return
	}
	v.Refused = append(v.Refused, RefusedRun{Lo: i, Hi: i, Fault: f})
}

// columnsValid reports whether every event of a columnar batch passes
// checkEvent, in one loop without calls (checkEvent event by event cost
// about as much as decoding the columns). It says true exactly where
// checkEvent passes every event (TestColumnsValid); on false the caller
// goes through checkEvent, which finds the events that fail and why.
func ColumnsValid(c *wire.Columns) bool {
	n := c.Len()
	if len(c.Metric) < n || len(c.Method) < n || len(c.Uncertainty) < n || len(c.Time) < n || len(c.Offset) < n {
		return false
	}
	// An empty string in the table (a tag's value, say) makes each
	// event's metric worth a look; without one no metric can be empty.
	someEmpty := slices.ContainsFunc(c.Strings, func(s []byte) bool { return len(s) == 0 })
	for i, v := range c.Value[:n] {
		m := wirepb.TimeMethod(int32(c.Method[i])) // as checkEvent gets it
		if v-v != 0 /* NaN or infinite */ || someEmpty && len(c.Strings[c.Metric[i]]) == 0 ||
			m < 0 || m > MaxMethod || c.Uncertainty[i] < 0 ||
			m != wirepb.TimeMethod_TIME_METHOD_UNTRUSTED && !correctedSane(c.Time[i], c.Offset[i]) {
			return false
		}
	}
	return true
}

// lastSeq is the sequence number of the batch's last event.
func (v *View) lastSeq() uint64 { return v.FirstSeq + uint64(v.Len()) - 1 }

// validateSendTime bounds send_time when the agent says its clock is trusted.
func validateSendTime(v *View) error {
	if !v.HasClock {
		return nil
	}
	if v.Clock.Method < 0 || v.Clock.Method > MaxMethod {
		return Reject(ReasonMethod, "clock method %d unknown", v.Clock.Method)
	}
	if v.Clock.Method != wirepb.TimeMethod_TIME_METHOD_UNTRUSTED && !correctedSane(v.SendTimeNs, v.Clock.OffsetNs) {
		return Reject(ReasonTime, "send_time %d corrected by %d outside [2000, 2200) with a %s clock", v.SendTimeNs, v.Clock.OffsetNs, v.Clock.Method)
	}
	return nil
}

// correctedSane says whether a trusted clock's reading, corrected by its
// offset, falls in [2000, 2200) (wire.CorrectedTimeOK).
func correctedSane(rawNs, offsetNs int64) bool { return wire.CorrectedTimeOK(rawNs, offsetNs) }

// checkEvent is wire.CheckEventValues on an event's fields, as a view or a
// columnar batch's columns hold them. columnsValid makes the same checks
// on whole columns: a check added there goes here too (TestColumnsValid
// compares the two).
func CheckEvent(value float64, metricLen int, method wirepb.TimeMethod, uncertaintyNs, deviceTimeNs, offsetNs int64) wire.Fault {
	return wire.CheckEventValues(value, metricLen, method, uncertaintyNs, deviceTimeNs, offsetNs)
}

// validateGaps checks the reported gaps: non-empty, ordered, and not
// overlapping the events the batch carries.
func validateGaps(v *View) error {
	first, last := v.FirstSeq, v.lastSeq()
	for i, g := range v.Gaps {
		if g.First == 0 || g.First > g.Last {
			return Reject(ReasonGap, "gap %d: [%d, %d] is empty or starts at 0", i, g.First, g.Last)
		}
		if g.First <= last && g.Last >= first {
			return Reject(ReasonGap, "gap %d: [%d, %d] overlaps the batch's events [%d, %d]", i, g.First, g.Last, first, last)
		}
	}
	return nil
}
