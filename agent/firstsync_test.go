package agent

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"edgeflow/uplink"
	"edgeflow/wire/wirepb"
)

// gateHub answers time requests like loopHub once open is closed, and
// fails them before.
type gateHub struct{ open chan struct{} }

func (h gateHub) Exchange(ctx context.Context, req *wirepb.TimeRequest) (*wirepb.TimeResponse, time.Time, error) {
	select {
	case <-h.open:
		return loopHub{}.Exchange(ctx, req)
	default:
		return nil, time.Time{}, errors.New("hub not answering yet")
	}
}

// lockedBuffer is a log sink the test may read while the agent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// waitUplinkStarted waits until the agent's uplink has left StateIdle,
// which it does only once Run has started it.
func waitUplinkStarted(t *testing.T, a *testAgent, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for a.up.Status().State == uplink.StateIdle {
		if time.Now().After(deadline) {
			t.Fatalf("uplink not started within %v", within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFirstSyncWaitHoldsTheUplink: with no trusted clock the uplink is not
// started (events are accepted meanwhile); the moment the clock is
// trusted it starts, with a trusted estimate, long before the wait ends.
func TestFirstSyncWaitHoldsTheUplink(t *testing.T) {
	o := testOptions(t)
	o.FirstSyncWait = time.Minute
	hub := gateHub{open: make(chan struct{})}
	o.Clock.Hub = hub
	a := startAgent(t, o)
	if code, _, body := a.post(`{"metric":"temp","value":1}`); code != 200 {
		t.Fatalf("post while waiting for the clock: %d %s", code, body)
	}
	// Give a wrongly started uplink the chance to show itself.
	time.Sleep(300 * time.Millisecond)
	if st := a.up.Status().State; st != uplink.StateIdle {
		t.Fatalf("uplink %s before the clock was trusted, want %s", st, uplink.StateIdle)
	}
	close(hub.open)
	waitUplinkStarted(t, a, 30*time.Second)
	if e := a.clock.Estimate(); !e.Trusted() {
		t.Errorf("uplink started with an untrusted clock %+v within a 1m first-sync-wait", e)
	}
}

// TestFirstSyncWaitEnds: a clock that never becomes trusted holds the
// uplink only for FirstSyncWait, and the agent says why it goes on; with
// NoFirstSyncWait it does not wait at all.
func TestFirstSyncWaitEnds(t *testing.T) {
	for _, tc := range []struct {
		name string
		wait time.Duration
		log  string
	}{
		{"bounded wait", 200 * time.Millisecond, "no trusted clock within first-sync-wait"},
		{"no wait", NoFirstSyncWait, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := testOptions(t)
			var logs lockedBuffer
			o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			o.FirstSyncWait = tc.wait
			o.Clock.Hub = gateHub{open: make(chan struct{})} // never opens
			a := startAgent(t, o)
			waitUplinkStarted(t, a, 30*time.Second)
			if e := a.clock.Estimate(); e.Trusted() {
				t.Fatalf("clock trusted without a time source: %+v", e)
			}
			if !strings.Contains(logs.String(), tc.log) {
				t.Errorf("log does not say %q:\n%s", tc.log, logs.String())
			}
			if tc.wait == NoFirstSyncWait && strings.Contains(logs.String(), "first-sync-wait") {
				t.Errorf("agent waited for the clock with NoFirstSyncWait:\n%s", logs.String())
			}
		})
	}
}
