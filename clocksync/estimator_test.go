package clocksync

import (
	"testing"
	"time"

	"edgeflow/wire/wirepb"
)

func ntpSample(src string, mono time.Duration, boot int64, bound time.Duration) sample {
	return sample{mono: mono, boot: boot, delay: 2 * bound, bound: bound, source: src, method: wirepb.TimeMethod_TIME_METHOD_NTP}
}

func TestSelectTruechimers(t *testing.T) {
	ms := time.Millisecond
	fit := &model{refMono: 0, refBoot: 0, rho: 1e-6, lastMono: 0, pts: []upoint{{0, 1e6}}, uLast: 1e6}
	for _, tc := range []struct {
		name  string
		round []sample
		cur   *model
		want  []string
	}{
		{"one", []sample{ntpSample("a", 0, 5e6, ms)}, nil, []string{"a"}},
		{"three agree", []sample{ntpSample("a", 0, 0, ms), ntpSample("b", 0, 1e6, ms), ntpSample("c", 0, -5e5, ms)}, nil, []string{"a", "b", "c"}},
		{"liar among three", []sample{ntpSample("a", 0, 0, ms), ntpSample("liar", 0, 5e9, ms), ntpSample("c", 0, 5e5, ms)}, nil, []string{"a", "c"}},
		{"touching intervals meet", []sample{ntpSample("a", 0, 0, ms), ntpSample("b", 0, 2e6, ms)}, nil, []string{"a", "b"}},
		{"two disagree, no fit", []sample{ntpSample("a", 0, 0, ms), ntpSample("b", 0, 5e9, ms)}, nil, nil},
		{"two disagree, fit breaks the tie", []sample{ntpSample("a", 0, 0, ms), ntpSample("b", 0, 5e9, ms)}, fit, []string{"a"}},
		{"three disagree", []sample{ntpSample("a", 0, 0, ms), ntpSample("b", 0, 5e9, ms), ntpSample("c", 0, -5e9, ms)}, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := selectTruechimers(tc.round, tc.cur)
			if len(got) != len(tc.want) {
				t.Fatalf("got %d samples %v, want %v", len(got), got, tc.want)
			}
			for i, s := range got {
				if s.source != tc.want[i] {
					t.Errorf("got[%d] = %s, want %s", i, s.source, tc.want[i])
				}
			}
		})
	}
}

func TestFitRecoversLine(t *testing.T) {
	o := Options{Servers: []string{"x"}}
	o.EnsureDefaults()
	e := newEstimator(&o)
	const drift = 50e-6
	boot := int64(1_700_000_000e9)
	var m *model
	for i := range 30 {
		mono := time.Duration(i) * 64 * time.Second
		b := boot + int64(drift*float64(mono))
		// Alternate errors of ±40 µs inside a 100 µs bound.
		b += int64((i%2)*80e3 - 40e3)
		m, _, _ = e.addRound([]sample{ntpSample("a", mono, b, 100*time.Microsecond)}, m, mono)
	}
	if !m.driftKnown || m.drift < 49e-6 || m.drift > 51e-6 {
		t.Errorf("drift %v (known %v), want 50e-6", m.drift, m.driftKnown)
	}
	last := 29 * 64 * time.Second
	truth := boot + int64(drift*float64(last))
	if err := time.Duration(m.predict(last) - truth).Abs(); err > m.uncertainty(last) || err > 50*time.Microsecond {
		t.Errorf("error %v, uncertainty %v", err, m.uncertainty(last))
	}
	// The bound widens with distance, both ways.
	if m.uncertainty(last+time.Hour) <= m.uncertainty(last) || m.uncertainty(-time.Hour) <= m.uncertainty(0) {
		t.Error("uncertainty does not widen away from the samples")
	}
	if len(e.window) != 30 {
		t.Errorf("window %d", len(e.window))
	}
	// The window is bounded.
	for i := 30; i < 200; i++ {
		mono := time.Duration(i) * 64 * time.Second
		m, _, _ = e.addRound([]sample{ntpSample("a", mono, boot+int64(drift*float64(mono)), 100*time.Microsecond)}, m, mono)
	}
	if len(e.window) != o.WindowSize {
		t.Errorf("window grew to %d, bound %d", len(e.window), o.WindowSize)
	}
}
