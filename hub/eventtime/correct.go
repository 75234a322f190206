package eventtime

import (
	"edgeflow/hub/batchview"
	"edgeflow/hub/hublog"
	"edgeflow/hub/ranges"
	"edgeflow/wire/wirepb"
)

// Correct returns an event's corrected time, its uncertainty and method:
// the agent's correction (deviceNs plus agentOffsetNs) when it trusts its
// clock, else the hub's estimate when it has one (HUB_ESTIMATE), else the
// raw device time, UNTRUSTED, with uncertaintyNs and m as they were. The
// applier and the index both use it, so a query by event time finds the
// events the applier applies at the time it gives them.
func Correct(deviceNs, agentOffsetNs, uncertaintyNs int64, m wirepb.TimeMethod, est hublog.HubEstimate) (eventNs, uncNs int64, method wirepb.TimeMethod) {
	if m != wirepb.TimeMethod_TIME_METHOD_UNTRUSTED {
		return deviceNs + agentOffsetNs, uncertaintyNs, m // bounded by validation
	}
	if !est.OK {
		return deviceNs, uncertaintyNs, m
	}
	t, ok := addNs(deviceNs, est.OffsetNs)
	if !ok || !batchview.SaneTime(t) {
		return deviceNs, uncertaintyNs, m
	}
	return t, est.UncertaintyNs, wirepb.TimeMethod_TIME_METHOD_HUB_ESTIMATE
}

// addNs adds two int64s and reports whether the sum did not overflow.
func addNs(a, b int64) (int64, bool) {
	s := a + b
	if (b > 0 && s < a) || (b < 0 && s > a) {
		return 0, false
	}
	return s, true
}

// FreshRefused returns the parts of a batch's refused runs that lie in
// fresh (what the entry applies): the entry records them, so a replay
// skips exactly the events the live apply skipped, and the index indexes
// none of them.
func FreshRefused(v *batchview.View, fresh []ranges.SeqRange) []hublog.RefusedRange {
	var out []hublog.RefusedRange
	for _, r := range v.Refused {
		lo, hi := v.FirstSeq+uint64(r.Lo), v.FirstSeq+uint64(r.Hi)
		for _, f := range fresh {
			if a, b := max(lo, f.First), min(hi, f.Last); a <= b {
				out = append(out, hublog.RefusedRange{SeqRange: ranges.SeqRange{First: a, Last: b}, Fault: r.Fault})
			}
		}
	}
	return out
}
