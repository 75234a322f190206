package clocksync

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"edgeflow/wire/wirepb"
)

// maxStateBytes bounds the state file read at start: 64 samples take a
// few kilobytes, so anything this large is not ours.
const maxStateBytes = 1 << 20

// stateVersion is the format of the state file.
const stateVersion = 1

// savedState is the state file: the estimator's samples with the boot
// their monotonic times belong to. Samples are points on the boot line
// of one boot, so they stay valid for a later process of the same boot,
// and the fit made from them widens by the drift bound with the monotonic
// time since the newest.
type savedState struct {
	Version int           `json:"version"`
	BootID  string        `json:"boot_id"`
	SavedNs int64         `json:"saved_mono_ns"`
	Samples []savedSample `json:"samples"`
}

type savedSample struct {
	MonoNs  int64  `json:"mono_ns"`
	BootNs  int64  `json:"boot_ns"`
	DelayNs int64  `json:"delay_ns"`
	BoundNs int64  `json:"bound_ns"`
	Source  string `json:"source"`
	Method  string `json:"method"`
}

// ErrBadState marks a state file that could not be used: unreadable,
// malformed, or holding values no estimator writes. The Clock starts a
// fresh estimate then.
var ErrBadState = errors.New("clocksync: bad clock state file")

// restore loads the state file into the estimator if it belongs to this
// boot, and logs why not otherwise. It never fails New: the worst outcome
// is the fresh estimate a Clock has without it.
func (c *Clock) restore() {
	path := c.opts.StatePath
	if !c.bootKnown {
		c.log.Info("boot id unknown: saved clock state not used", "path", path)
		return
	}
	st, err := readState(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		c.log.Info("no saved clock state; starting a fresh estimate", "path", path)
		return
	case err != nil:
		c.log.Warn("saved clock state unusable; starting a fresh estimate", "path", path, "err", err)
		return
	case st.BootID != c.boot:
		c.log.Info("saved clock state is from another boot; starting a fresh estimate",
			"path", path, "saved_boot_id", st.BootID, "boot_id", c.boot)
		return
	}
	now := c.opts.Mono()
	samples, err := st.samples(now, c.opts.WindowSize)
	if err != nil {
		c.log.Warn("saved clock state unusable; starting a fresh estimate", "path", path, "err", err)
		return
	}
	c.est.window = samples
	c.est.trim(now)
	m := c.est.fitRound(c.est.window)
	c.model.Store(m)
	est := c.estimateAt(m, now, c.opts.Wall())
	c.log.Info("clock estimate restored from saved state", "path", path, "samples", len(c.est.window),
		"saved", time.Duration(int64(now)-st.SavedNs), "trusted", est.Trusted(), "offset", est.Offset,
		"uncertainty", est.Uncertainty, "source", est.Source)
}

func readState(path string) (*savedState, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxStateBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrBadState, path, err)
	}
	if len(b) > maxStateBytes {
		return nil, fmt.Errorf("%w %s: larger than %d bytes", ErrBadState, path, maxStateBytes)
	}
	var st savedState
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrBadState, path, err)
	}
	if st.Version != stateVersion {
		return nil, fmt.Errorf("%w %s: version %d, want %d", ErrBadState, path, st.Version, stateVersion)
	}
	return &st, nil
}

// samples checks the saved samples against the current monotonic time
// and returns at most size of them, the newest.
func (st *savedState) samples(now time.Duration, size int) ([]sample, error) {
	if len(st.Samples) == 0 {
		return nil, fmt.Errorf("%w: no samples", ErrBadState)
	}
	if st.SavedNs < 0 || st.SavedNs > int64(now) {
		return nil, fmt.Errorf("%w: saved at monotonic %v, after now (%v)", ErrBadState, time.Duration(st.SavedNs), now)
	}
	if len(st.Samples) > size {
		st.Samples = st.Samples[len(st.Samples)-size:]
	}
	out := make([]sample, 0, len(st.Samples))
	for i, s := range st.Samples {
		m, ok := wirepb.TimeMethod_value[s.Method]
		switch {
		case s.MonoNs < 0 || s.MonoNs > st.SavedNs:
			return nil, fmt.Errorf("%w: samples[%d]: monotonic %v outside 0..saved (%v)", ErrBadState, i, time.Duration(s.MonoNs), time.Duration(st.SavedNs))
		case s.BoundNs <= 0 || s.DelayNs < 0:
			return nil, fmt.Errorf("%w: samples[%d]: bound %v, delay %v: want positive", ErrBadState, i, time.Duration(s.BoundNs), time.Duration(s.DelayNs))
		case !ok || (wirepb.TimeMethod(m) != wirepb.TimeMethod_TIME_METHOD_NTP && wirepb.TimeMethod(m) != wirepb.TimeMethod_TIME_METHOD_HUB_SYNC):
			return nil, fmt.Errorf("%w: samples[%d]: method %q, want NTP or HUB_SYNC", ErrBadState, i, s.Method)
		}
		out = append(out, sample{mono: time.Duration(s.MonoNs), boot: s.BootNs, delay: time.Duration(s.DelayNs),
			bound: time.Duration(s.BoundNs), source: s.Source, method: wirepb.TimeMethod(m)})
	}
	return out, nil
}

// maybeSave writes the state file after a round changed the estimate, at
// most once per Options.StateInterval unless force. The caller holds c.mu.
func (c *Clock) maybeSave(now time.Duration, force bool) {
	if c.opts.StatePath == "" || !c.bootKnown || len(c.est.window) == 0 {
		return
	}
	if !force && c.savedAt >= 0 && now-c.savedAt < c.opts.StateInterval {
		c.saveDue = true
		return
	}
	st := savedState{Version: stateVersion, BootID: c.boot, SavedNs: int64(now)}
	for _, s := range c.est.window {
		st.Samples = append(st.Samples, savedSample{MonoNs: int64(s.mono), BootNs: s.boot, DelayNs: int64(s.delay),
			BoundNs: int64(s.bound), Source: s.source, Method: s.method.String()})
	}
	if err := writeState(c.opts.StatePath, &st); err != nil {
		c.metrics.stateWrites.WithLabelValues("error").Inc()
		c.log.Warn("saving the clock state failed; a restart will start a fresh estimate", "err", err)
		return
	}
	c.metrics.stateWrites.WithLabelValues("ok").Inc()
	c.savedAt, c.saveDue = now, false
}

// writeState replaces path atomically: a temporary file in the same
// directory, synced, then renamed over it, so a crash leaves the old file
// or the new one, never a torn one.
func writeState(path string, st *savedState) (err error) {
	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("encode clock state: %w", err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".clock-state-*.tmp")
	if err != nil {
		return fmt.Errorf("write clock state: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if _, err = f.Write(b); err != nil {
		return fmt.Errorf("write clock state %s: %w", f.Name(), err)
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("sync clock state %s: %w", f.Name(), err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("close clock state %s: %w", f.Name(), err)
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("replace clock state %s: %w", path, err)
	}
	return nil
}
