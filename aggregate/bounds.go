package aggregate

import (
	"errors"
	"fmt"
)

// notice gathers what one Apply or Tick held back or dropped, for its
// error.
type notice struct {
	quarantined, heldPartials, dropped, seriesDropped int
	device, droppedDevice, seriesDevice, seriesCap    string
}

// err describes the events dropped (nil when none).
func (n *notice) err(e *Engine) error {
	var errs []error
	if n.seriesDropped > 0 {
		limit := e.opt.MaxSeries
		if n.seriesCap == "max_series_per_device" {
			limit = e.opt.MaxSeriesPerDevice
		}
		errs = append(errs, fmt.Errorf("%w: %d events of new series from device %q dropped (%s=%d)",
			ErrSeriesLimit, n.seriesDropped, n.seriesDevice, n.seriesCap, limit))
	}
	if n.dropped > 0 {
		errs = append(errs, fmt.Errorf("%w: %d held events dropped, the furthest ahead (quarantine_size=%d; the last from device %q)",
			ErrQuarantineFull, n.dropped, e.opt.QuarantineSize, n.droppedDevice))
	}
	return errors.Join(errs...)
}

// held describes the events held in the quarantine (nil when none).
func (n *notice) held(e *Engine) error {
	var errs []error
	if n.quarantined > 0 {
		errs = append(errs, fmt.Errorf("%w: %d events from device %q are more than future_horizon=%v ahead of the hub's time: held out of every window until it reaches them",
			ErrQuarantined, n.quarantined, n.device, e.opt.FutureHorizon))
	}
	if n.heldPartials > 0 {
		errs = append(errs, fmt.Errorf("%w: %d events from device %q held in the quarantine: max_live_partials=%d partials are live and those of windows that are not final stay in memory",
			ErrPartialsLimit, n.heldPartials, n.device, e.opt.MaxLivePartials))
	}
	return errors.Join(errs...)
}

// Held describes the events the last Apply or Tick held in the quarantine,
// nil when none: errors wrapping ErrQuarantined (beyond future_horizon)
// and ErrPartialsLimit (no room within max_live_partials). Nothing held is
// lost, so Apply does not report it; the caller may log it. Call it from
// the goroutine that calls Apply.
func (e *Engine) Held() error {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.notice.held(e)
}

// refuseSeries counts an event of a new series that the series table
// refused.
func (e *Engine) refuseSeries(device string) {
	limit, _ := e.series.full(device)
	e.stats.seriesDropped++
	if limit == "max_series_per_device" {
		e.stats.deviceSeriesDropped++
	}
	e.notice.seriesDropped++
	e.notice.seriesDevice, e.notice.seriesCap = device, limit
}

// roomFor reports whether an event of series id may go to bucket bk: its
// partial is live, or one more partial fits within max_live_partials. At
// the cap it evicts final partials, oldest first; partials of windows that
// are not final stay, so when they alone fill the cap the answer is false.
func (e *Engine) roomFor(id uint32, bk int64) bool {
	if e.live < e.opt.MaxLivePartials {
		return true
	}
	s := &e.series.list[id]
	if n := len(s.parts); n > 0 && s.parts[n-1].bucket == bk {
		return true
	}
	if _, found := searchParts(s.parts, bk); found {
		return true
	}
	if e.capTried && e.capFinal == e.clk.final {
		return false
	}
	e.relieveTo(e.live, e.opt.MaxLivePartials-e.opt.MaxLivePartials/8)
	if e.live < e.opt.MaxLivePartials {
		return true
	}
	// Every final partial left: none can become final before the
	// watermark moves, so the next events need not try again until then.
	e.capTried, e.capFinal = true, e.clk.final
	return false
}

// countLive counts the live partials (after a restore).
func (e *Engine) countLive() int {
	n := 0
	for i := range e.series.list {
		n += len(e.series.list[i].parts)
	}
	return n
}
