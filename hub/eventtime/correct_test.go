package eventtime

import (
	"math"
	"testing"
	"time"

	"edgeflow/hub/hublog"
	"edgeflow/wire/wirepb"
)

// TestCorrect: an event the agent corrected keeps its method and
// uncertainty and gets the agent's offset; an UNTRUSTED one takes the
// hub's estimate when there is one and the sum is a sane time, else stays
// at its device time, UNTRUSTED.
func TestCorrect(t *testing.T) {
	dev := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	est := hublog.HubEstimate{OK: true, OffsetNs: int64(time.Hour), UncertaintyNs: 7e6}
	const (
		ntp       = wirepb.TimeMethod_TIME_METHOD_NTP
		untrusted = wirepb.TimeMethod_TIME_METHOD_UNTRUSTED
		hubEst    = wirepb.TimeMethod_TIME_METHOD_HUB_ESTIMATE
	)
	tests := []struct {
		name     string
		dev, off int64
		m        wirepb.TimeMethod
		est      hublog.HubEstimate
		wantNs   int64
		wantUnc  int64
		wantM    wirepb.TimeMethod
	}{
		{"agent corrected", dev, 1500, ntp, est, dev + 1500, 2000, ntp},
		{"untrusted, no estimate", dev, 0, untrusted, hublog.HubEstimate{}, dev, 2000, untrusted},
		{"untrusted, estimate", dev, 0, untrusted, est, dev + int64(time.Hour), 7e6, hubEst},
		{"untrusted, estimate overflows", math.MaxInt64 - 10, 0, untrusted, est, math.MaxInt64 - 10, 2000, untrusted},
		{"untrusted, estimate before the sane bounds", dev, 0, untrusted, hublog.HubEstimate{OK: true, OffsetNs: -dev}, dev, 2000, untrusted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ns, unc, m := Correct(tt.dev, tt.off, 2000, tt.m, tt.est)
			if ns != tt.wantNs || unc != tt.wantUnc || m != tt.wantM {
				t.Fatalf("Correct = %d, %d, %v; want %d, %d, %v", ns, unc, m, tt.wantNs, tt.wantUnc, tt.wantM)
			}
		})
	}
}
