package buffer

import "time"

// FillRateWindow is the interval Stream.Fill measures the fill rate over:
// the rate is the change of the held bytes since the newest sample at
// least this old (so over FillRateWindow to FillRateWindow plus a quarter
// of it while the stream changes), or since the stream was opened when it
// is younger.
const FillRateWindow = time.Minute

// fillSamples is the length of a stream's ring of byte samples; one is
// taken at most every FillRateWindow/4, so the ring spans twice the window.
const fillSamples = 8

// fillSample is the bytes a stream held at a time (Unix ms).
type fillSample struct{ ms, bytes int64 }

// fillRing keeps a few samples of a stream's held bytes, taken when the
// committer changes them and when Fill reads them, so the fill rate costs
// a few comparisons, never a read of the store. The caller holds the
// stream's mu.
type fillRing struct {
	s    [fillSamples]fillSample
	n, i int // samples held; index of the newest
}

// observe records bytes held at nowMs, if the newest sample is at least a
// quarter window old (or there is none).
func (r *fillRing) observe(nowMs, bytes int64) {
	if r.n > 0 && nowMs-r.s[r.i].ms < FillRateWindow.Milliseconds()/4 {
		return
	}
	if r.n > 0 {
		r.i = (r.i + 1) % fillSamples
	}
	r.s[r.i] = fillSample{nowMs, bytes}
	r.n = min(r.n+1, fillSamples)
}

// rate is the change per second of the held bytes from the newest sample
// at least FillRateWindow before nowMs (else the oldest sample) to bytes
// at nowMs, and the interval it spans; 0 and 0 without an older sample.
func (r *fillRing) rate(nowMs, bytes int64) (float64, time.Duration) {
	if r.n == 0 {
		return 0, 0
	}
	base := r.s[(r.i-r.n+1+fillSamples)%fillSamples] // the oldest
	for k := range r.n {
		s := r.s[(r.i-k+fillSamples)%fillSamples] // newest first
		if nowMs-s.ms >= FillRateWindow.Milliseconds() {
			base = s
			break
		}
	}
	span := nowMs - base.ms
	if span <= 0 {
		return 0, 0
	}
	return float64(bytes-base.bytes) * 1000 / float64(span), time.Duration(span) * time.Millisecond
}

// Fill is how full a stream is, for an agent's status: enough for a hub to
// tell the fill ratio and the time until the stream reaches its bound.
type Fill struct {
	// UsedBytes is what the stream holds (uncompressed blocks, as
	// MaxBytes counts them) and CapacityBytes its MaxBytes.
	UsedBytes, CapacityBytes int64
	// Rate is the recent change of UsedBytes in bytes/s (negative while
	// it drains), measured over RateInterval (about FillRateWindow; 0
	// until the stream has been open for a sample's worth of time).
	Rate         float64
	RateInterval time.Duration
}

// Fill returns the stream's fill figures. It reads counters the committer
// keeps, never the store, so it suits a periodic status.
func (st *Stream) Fill() Fill {
	nowMs := st.s.opts.Now().UnixMilli()
	st.mu.Lock()
	defer st.mu.Unlock()
	st.fill.observe(nowMs, st.bytes)
	rate, span := st.fill.rate(nowMs, st.bytes)
	return Fill{UsedBytes: st.bytes, CapacityBytes: st.opts.MaxBytes, Rate: rate, RateInterval: span}
}
