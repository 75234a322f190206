package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"edgeflow/clocksync"
	"edgeflow/wire/wirepb"
)

// loopHub answers time requests from this machine's clock, as the hub's
// time service on the same machine does; down, it never answers.
type loopHub struct{ down bool }

func (h loopHub) Exchange(_ context.Context, req *wirepb.TimeRequest) (*wirepb.TimeResponse, time.Time, error) {
	if h.down {
		return nil, time.Time{}, errors.New("hub unreachable")
	}
	now := time.Now().UnixNano()
	return &wirepb.TimeResponse{RequestId: req.RequestId, T1Ns: req.T1Ns, T2Ns: now, T3Ns: now}, time.Now(), nil
}

// TestAgentKeepsItsClockAcrossRestart: an agent that synced once and
// stopped leaves its estimate in its data directory; a new agent on it,
// in the same boot and with its time source gone, stamps its first event
// trusted and uncorrected (a right clock), not UNTRUSTED.
func TestAgentKeepsItsClockAcrossRestart(t *testing.T) {
	if _, err := clocksync.ReadBootID(); err != nil {
		t.Skipf("no boot id on this system (%v): the state is never restored", err)
	}
	o := testOptions(t)
	o.Clock.Hub = loopHub{}
	a := startAgent(t, o)
	deadline := time.Now().Add(10 * time.Second)
	for !a.clock.Estimate().Trusted() {
		if time.Now().After(deadline) {
			t.Fatal("no trusted estimate within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(o.DataDir, ClockStateFile)); err != nil {
		t.Fatalf("no clock state after a stop: %v", err)
	}

	o.Clock.Hub = loopHub{down: true}
	b := startAgent(t, o)
	if code, _, body := b.post(`{"metric":"temp","value":1}`); code != 200 {
		t.Fatalf("post: %d %s", code, body)
	}
	evs := storedEvents(t, b.Stream())
	ev := evs[len(evs)-1]
	if ev.Method != wirepb.TimeMethod_TIME_METHOD_HUB_SYNC || ev.OffsetNs != 0 || ev.UncertaintyNs <= 0 {
		t.Errorf("event after the restart: method %v offset %v ± %v, want HUB_SYNC, offset 0 and a bound",
			ev.Method, time.Duration(ev.OffsetNs), time.Duration(ev.UncertaintyNs))
	}
}
