package hub

import (
	"math"
	"slices"
	"time"

	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// Sane bounds for trusted timestamps: 2000-01-01 to 2200-01-01 UTC.
var (
	minTimeNs = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	maxTimeNs = time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
)

// maxMethod is the largest TimeMethod this build knows.
const maxMethod = wirepb.TimeMethod_TIME_METHOD_DEVICE

// saneTime reports whether ns lies within the trusted bounds.
func saneTime(ns int64) bool { return ns >= minTimeNs && ns < maxTimeNs }

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
	if v.columnar && !columnsValid(&v.cols) {
		c := &v.cols
		for i := range n {
			if err := checkEvent(i, c.Value[i], len(c.Strings[c.Metric[i]]), wirepb.TimeMethod(int32(c.Method[i])), c.Uncertainty[i], c.Time[i], c.Offset[i]); err != nil {
				return err
			}
		}
	} else {
		for i := range v.events {
			if err := validateEvent(&v.events[i], i); err != nil {
				return err
			}
		}
	}
	return validateGaps(v)
}

// columnsValid reports whether every event of a columnar batch passes
// checkEvent, in one loop without calls or error values (checkEvent event
// by event cost about as much as decoding the columns). It says true
// exactly where checkEvent passes every event (TestColumnsValid); on false
// the caller goes through checkEvent, which names the first event that
// fails and why.
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
// offset, falls in [2000, 2200). The raw reading may be anywhere a device
// clock goes (1970 after a power loss is common: the agent's offset
// repairs it); both are bounded first so the sum cannot wrap around into
// the sane range.
func correctedSane(rawNs, offsetNs int64) bool {
	return rawNs >= -maxTimeNs && rawNs <= maxTimeNs && offsetNs >= -maxTimeNs && offsetNs <= maxTimeNs &&
		saneTime(rawNs+offsetNs)
}

// validateEvent checks one event's value, metric and timestamps.
func validateEvent(e *eventView, i int) error {
	return checkEvent(i, e.value, len(e.metric), e.method, e.uncertaintyNs, e.deviceTimeNs, e.offsetNs)
}

// checkEvent is validateEvent on event i's fields, as a view or a
// columnar batch's columns hold them. columnsValid makes the same checks
// on whole columns: a check added here goes there too (TestColumnsValid
// compares the two).
func checkEvent(i int, value float64, metricLen int, method wirepb.TimeMethod, uncertaintyNs, deviceTimeNs, offsetNs int64) error {
	if math.IsNaN(value) || math.IsInf(value, 0) {
		return reject(ReasonValue, "event %d: value %v", i, value)
	}
	if metricLen == 0 {
		return reject(ReasonMetric, "event %d: empty metric name", i)
	}
	if method < 0 || method > maxMethod {
		return reject(ReasonMethod, "event %d: time method %d unknown", i, method)
	}
	if uncertaintyNs < 0 {
		return reject(ReasonTime, "event %d: negative uncertainty %d", i, uncertaintyNs)
	}
	if method == wirepb.TimeMethod_TIME_METHOD_UNTRUSTED {
		return nil
	}
	if !correctedSane(deviceTimeNs, offsetNs) {
		return reject(ReasonTime, "event %d: corrected time %d + %d outside [2000, 2200) with method %s", i, deviceTimeNs, offsetNs, method)
	}
	return nil
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
