package hub

import (
	"math"
	"slices"

	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// Sane bounds for trusted timestamps: wire's, 2000-01-01 to 2200-01-01 UTC.
const (
	minTimeNs = wire.MinEventTimeNs
	maxTimeNs = wire.MaxEventTimeNs
)

// maxMethod is the largest TimeMethod this build knows.
const maxMethod = wire.MaxTimeMethod

// maxRefusedRuns bounds the runs of consecutive refused events one batch
// may have (each becomes a gap range of its stream and a range in the
// ack); a batch with more is rejected whole.
const maxRefusedRuns = 32

// saneTime reports whether ns lies within the trusted bounds.
func saneTime(ns int64) bool { return wire.SaneTime(ns) }

// validateBatch checks what can be checked without the stream's state.
// topicDevice is the device named by the topic.
func validateBatch(v *batchView, topicDevice string) error {
	if string(v.device) != topicDevice {
		return reject(ReasonDeviceMismatch, "payload device %q, topic device %q", v.device, topicDevice)
	}
	if len(v.streamID) != 16 {
		return reject(ReasonStreamID, "stream id is %d bytes, want 16", len(v.streamID))
	}
	n := v.len()
	if n == 0 {
		return reject(ReasonNoEvents, "batch has no events")
	}
	if v.firstSeq == 0 {
		return reject(ReasonFirstSeq, "first_seq is 0 (sequences start at 1)")
	}
	if v.firstSeq > math.MaxUint64-uint64(n) {
		return reject(ReasonSeqOverflow, "first_seq %d + %d events overflows", v.firstSeq, n)
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
func validateEvents(v *batchView) error {
	if v.columnar && v.badStrings == nil && columnsValid(&v.cols) {
		return nil
	}
	if v.columnar {
		c := &v.cols
		for i := range v.len() {
			f := checkEvent(c.Value[i], len(c.Strings[c.Metric[i]]), wirepb.TimeMethod(int32(c.Method[i])), c.Uncertainty[i], c.Time[i], c.Offset[i])
			if f == wire.FaultNone && v.badStrings != nil {
				f = v.columnStringFault(i)
			}
			v.refuse(i, f)
		}
	} else {
		for i := range v.events {
			e := &v.events[i]
			f := e.fault
			if f == wire.FaultNone {
				f = checkEvent(e.value, len(e.metric), e.method, e.uncertaintyNs, e.deviceTimeNs, e.offsetNs)
			}
			v.refuse(i, f)
		}
	}
	if len(v.refused) > maxRefusedRuns {
		r := v.refused[0]
		return reject(Reason(r.fault.Reason()), "%d runs of refused events, at most %d in one batch (the first: event %d, %s)", len(v.refused), maxRefusedRuns, r.lo, r.fault.Field())
	}
	return nil
}

// refusedRun is a run of consecutive events of a batch, [lo, hi] by index,
// that the hub refuses for one fault.
type refusedRun struct {
	lo, hi int
	fault  wire.Fault
}

// refuse records that event i fails with fault f (FaultNone: it passes),
// extending the last run when it can. Events come in index order.
func (v *batchView) refuse(i int, f wire.Fault) {
	if f == wire.FaultNone {
		return
	}
	if n := len(v.refused); n > 0 && v.refused[n-1].hi == i-1 && v.refused[n-1].fault == f {
		v.refused[n-1].hi = i
		return
	}
	v.refused = append(v.refused, refusedRun{lo: i, hi: i, fault: f})
}

// columnsValid reports whether every event of a columnar batch passes
// checkEvent, in one loop without calls (checkEvent event by event cost
// about as much as decoding the columns). It says true exactly where
// checkEvent passes every event (TestColumnsValid); on false the caller
// goes through checkEvent, which finds the events that fail and why.
func columnsValid(c *wire.Columns) bool {
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
			m < 0 || m > maxMethod || c.Uncertainty[i] < 0 ||
			m != wirepb.TimeMethod_TIME_METHOD_UNTRUSTED && !correctedSane(c.Time[i], c.Offset[i]) {
			return false
		}
	}
	return true
}

// lastSeq is the sequence number of the batch's last event.
func (v *batchView) lastSeq() uint64 { return v.firstSeq + uint64(v.len()) - 1 }

// validateSendTime bounds send_time when the agent says its clock is trusted.
func validateSendTime(v *batchView) error {
	if !v.hasClock {
		return nil
	}
	if v.clock.method < 0 || v.clock.method > maxMethod {
		return reject(ReasonMethod, "clock method %d unknown", v.clock.method)
	}
	if v.clock.method != wirepb.TimeMethod_TIME_METHOD_UNTRUSTED && !correctedSane(v.sendTimeNs, v.clock.offsetNs) {
		return reject(ReasonTime, "send_time %d corrected by %d outside [2000, 2200) with a %s clock", v.sendTimeNs, v.clock.offsetNs, v.clock.method)
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
func checkEvent(value float64, metricLen int, method wirepb.TimeMethod, uncertaintyNs, deviceTimeNs, offsetNs int64) wire.Fault {
	return wire.CheckEventValues(value, metricLen, method, uncertaintyNs, deviceTimeNs, offsetNs)
}

// validateGaps checks the reported gaps: non-empty, ordered, and not
// overlapping the events the batch carries.
func validateGaps(v *batchView) error {
	first, last := v.firstSeq, v.lastSeq()
	for i, g := range v.gaps {
		if g.first == 0 || g.first > g.last {
			return reject(ReasonGap, "gap %d: [%d, %d] is empty or starts at 0", i, g.first, g.last)
		}
		if g.first <= last && g.last >= first {
			return reject(ReasonGap, "gap %d: [%d, %d] overlaps the batch's events [%d, %d]", i, g.first, g.last, first, last)
		}
	}
	return nil
}
