package clocksync

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"edgeflow/wire/wirepb"
)

// stateClock is a Clock on dev that keeps its state in path, with its logs
// in a buffer. Its hub answers from ref unless ref is nil.
func stateClock(t *testing.T, dev *simClock, ref *refClock, path, boot string) (*Clock, *bytes.Buffer) {
	t.Helper()
	var logs bytes.Buffer
	var hub HubExchanger = &fakeHub{ref: ref, delay: 200 * time.Microsecond}
	if ref == nil {
		hub = deadHub{}
	}
	c := newTestClock(t, dev, nil, func(o *Options) {
		o.Hub, o.StatePath, o.BootID = hub, path, boot
		o.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
	return c, &logs
}

// deadHub never answers.
type deadHub struct{}

func (deadHub) Exchange(context.Context, *wirepb.TimeRequest) (*wirepb.TimeResponse, time.Time, error) {
	return nil, time.Time{}, ErrNotConnected
}

// syncedState runs a clock 3 minutes behind until its estimate is known
// and saved, and returns the state path, the reference and the estimate.
func syncedState(t *testing.T, dev *simClock) (string, *refClock, Estimate) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "clock-state.json")
	ref := newRef(dev, 3*time.Minute, 20)
	c, _ := stateClock(t, dev, ref, path, testBoot)
	pollN(t, c, dev, 8, 15*time.Second)
	c.flushState()
	e := c.Estimate()
	if !e.Trusted() {
		t.Fatalf("not synced: %+v", e)
	}
	return path, ref, e
}

func TestStateRestoredInTheSameBoot(t *testing.T) {
	dev := newFrozenSimClock(day0)
	path, ref, saved := syncedState(t, dev)
	dev.Advance(10 * time.Minute) // the agent is down for 10 minutes

	c, logs := stateClock(t, dev, nil, path, testBoot)
	select {
	case <-c.Synced():
	default:
		t.Fatal("Synced not closed after a restore")
	}
	e := checkContains(t, c, ref, 50*time.Millisecond)
	// 10 minutes at the drift bound (15 ppm plus the fit's error) widen it.
	if e.Uncertainty < saved.Uncertainty+9*time.Millisecond {
		t.Errorf("uncertainty %v after 10 min, saved %v: not widened by the drift bound", e.Uncertainty, saved.Uncertainty)
	}
	var ev wirepb.Event
	c.StampEvent(&ev)
	if ev.Method != wirepb.TimeMethod_TIME_METHOD_HUB_SYNC || ev.OffsetNs == 0 {
		t.Errorf("event stamped %v offset %v, want HUB_SYNC with the saved correction", ev.Method, time.Duration(ev.OffsetNs))
	}
	if !strings.Contains(logs.String(), "restored from saved state") {
		t.Errorf("no restore log line:\n%s", logs)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("state directory holds %d files, want only the state (no temporary left)", len(entries))
	}
}

func TestStateIgnored(t *testing.T) {
	dev := newFrozenSimClock(day0)
	path, _, _ := syncedState(t, dev)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, boot, content, log string
	}{
		{"after a reboot", "another-boot", string(good), "from another boot"},
		{"missing", testBoot, "", "no saved clock state"},
		{"corrupt", testBoot, `{"version":1,"boot_id":"test-bo`, "unusable"},
		{"not ours", testBoot, strings.Repeat(" ", maxStateBytes+1), "larger than"},
		{"a bound of zero", testBoot, strings.Replace(string(good), `"bound_ns":`, `"bound_ns":0,"x":`, 1), "bound 0s"},
		{"saved in the future", testBoot, strings.Replace(string(good), `"saved_mono_ns":`, `"saved_mono_ns":9`, 1), "after now"},
		{"an unknown method", testBoot, strings.Replace(string(good), `"TIME_METHOD_HUB_SYNC"`, `"TIME_METHOD_DEVICE"`, 1), "want NTP or HUB_SYNC"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "clock-state.json")
			if tc.content != "" {
				if err := os.WriteFile(p, []byte(tc.content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			c, logs := stateClock(t, dev, nil, p, tc.boot)
			if e := c.Estimate(); e.Trusted() {
				t.Errorf("estimate %+v from a state that should be ignored", e)
			}
			if !strings.Contains(logs.String(), tc.log) {
				t.Errorf("log does not say %q:\n%s", tc.log, logs)
			}
		})
	}
}

// TestStateWrittenAtABoundedRate: rounds closer than StateInterval do not
// each rewrite the file, and Run's end writes what was left out.
func TestStateWrittenAtABoundedRate(t *testing.T) {
	dev := newFrozenSimClock(day0)
	ref := newRef(dev, time.Second, 0)
	path := filepath.Join(t.TempDir(), "clock-state.json")
	c, _ := stateClock(t, dev, ref, path, testBoot)
	pollN(t, c, dev, 5, time.Second) // 5 rounds in 5 s, interval 10 s
	if got := counterValue(c.metrics.stateWrites.WithLabelValues("ok")); got != 1 {
		t.Errorf("%v state writes for 5 rounds within the interval, want 1", got)
	}
	c.flushState()
	st, err := readState(path)
	if err != nil || len(st.Samples) != 5 {
		t.Fatalf("state after flush: %v samples, err %v; want 5", len(st.Samples), err)
	}
}
