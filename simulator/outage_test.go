package simulator

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"edgeflow/hub"
	"edgeflow/wire"
)

// statusMsg is a status message a device's uplink (or the broker, for its
// last will) published.
type statusMsg struct {
	device  string
	online  bool
	stamped time.Time // the payload's time: when the uplink built it
	arrived time.Time
}

// statusLog records every status message on the broker.
type statusLog struct {
	mu   sync.Mutex
	msgs []statusMsg
}

// watchStatus subscribes to every device's status topic on broker (host:port).
func watchStatus(t *testing.T, broker string) *statusLog {
	t.Helper()
	l := &statusLog{}
	o := mqtt.NewClientOptions().AddBroker("tcp://" + broker).SetClientID("outage-test-status").
		SetCleanSession(true).SetOrderMatters(false)
	c := mqtt.NewClient(o)
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("status watcher: connect: %v", tok.Error())
	}
	t.Cleanup(func() { c.Disconnect(100) })
	topic := wire.TopicPrefix + "+/" + wire.KindStatus
	tok := c.Subscribe(topic, 1, func(_ mqtt.Client, m mqtt.Message) {
		at := time.Now()
		st, err := wire.DecodeStatus(m.Payload(), wire.Limits{})
		if err != nil {
			t.Errorf("status on %s: %v", m.Topic(), err)
			return
		}
		dev := strings.TrimSuffix(strings.TrimPrefix(m.Topic(), wire.TopicPrefix), "/"+wire.KindStatus)
		l.mu.Lock()
		l.msgs = append(l.msgs, statusMsg{dev, st.GetOnline(), time.Unix(0, st.GetTimeNs()), at})
		l.mu.Unlock()
	})
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("status watcher: subscribe %s: %v", topic, tok.Error())
	}
	return l
}

// all returns the messages recorded so far, in arrival order.
func (l *statusLog) all() []statusMsg {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.msgs)
}

// runStart is when the fleet's run started (call after Run).
func (f *Fleet) runStart() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.start
}

// verifyNoLoss checks the hub's data against the fleet's truth: every event
// applied once.
func verifyNoLoss(t *testing.T, f *Fleet, srv *hub.Server) {
	t.Helper()
	vr, err := Verify(context.Background(), f.Truth(), VerifyOptions{HubURL: "http://" + srv.HTTPAddr()})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("verify: lost %d dup %d applied %d of %d", vr.Lost, vr.Duplicated, vr.Applied, vr.Events)
	if vr.Lost != 0 || vr.Duplicated != 0 || vr.Applied != vr.Events || vr.Events == 0 {
		t.Fatalf("lost %d duplicated %d applied %d of %d: %v", vr.Lost, vr.Duplicated, vr.Applied, vr.Events, vr.LossDevices)
	}
}

// TestHubOutageMassReconnect runs 20 devices through a compressed hub
// outage against an in-process hub. The uplinks must keep running (no
// uplink restarted) and reconnect through their own backoff: every device
// fails to connect during the outage, none gets back in before it ends,
// each reconnects after it within the backoff cap, spread over the cap by
// full jitter rather than in one wave; and nothing is lost or duplicated.
func TestHubOutageMassReconnect(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	srv := startHub(t)
	const devices = 20
	// Scenario times at a scale of 30: the outage is 2 s to 8 s of a 10 s
	// run. Attempt k waits uniformly in [0, min(2s, 100ms*2^k)]: five
	// failed attempts (3.1 s at most) reach the cap, well within the 6 s
	// outage, so when it ends each uplink is in a wait uniform over up to
	// 2 s, and its first attempt after the end is spread over [0, 2s].
	backoffMax := 2 * time.Second
	sc := Scenario{
		Name: "hub-outage", Devices: devices, Duration: 5 * time.Minute, TimeScale: 30,
		Resolution: time.Second, BoundaryGuard: 100 * time.Millisecond, DrainTimeout: 30 * time.Second,
		HubOutage: Outage{At: time.Minute, For: 3 * time.Minute},
		Classes:   []DeviceClass{{Metrics: []MetricSpec{{Name: "temp", Rate: 10}}}},
		Uplink:    UplinkTuning{BackoffMin: 100 * time.Millisecond, BackoffMax: backoffMax, AckTimeout: 2 * time.Second},
	}
	status := watchStatus(t, srv.BrokerAddr())
	f := newTestFleet(t, srv, sc, nil)
	rep, err := f.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("report: %+v", rep)
	if rep.Phase != "drained" || rep.Appended == 0 || rep.Acked != rep.Appended {
		t.Fatalf("phase %s appended %d acked %d: want drained", rep.Phase, rep.Appended, rep.Acked)
	}
	if n := f.uplinkStarts.Load(); n != devices {
		t.Errorf("%d uplinks started for %d devices: a hub outage must leave the uplinks running", n, devices)
	}
	if rep.Reconnects < devices {
		t.Errorf("%d uplink reconnects: want at least one per device (%d)", rep.Reconnects, devices)
	}
	if rep.ConnectFailures < devices {
		t.Errorf("%d failed connects: want at least one per device (%d) while the hub refused them", rep.ConnectFailures, devices)
	}

	start := f.runStart()
	down, back := start.Add(f.sc.scaled(sc.HubOutage.At)), start.Add(f.sc.scaled(sc.HubOutage.At+sc.HubOutage.For))
	first := map[string]time.Duration{} // first online status after the outage, since its end
	for _, m := range status.all() {
		switch {
		case !m.online:
		case m.arrived.After(down.Add(500*time.Millisecond)) && m.arrived.Before(back):
			t.Errorf("%s online at %v, during the hub outage (%v to %v)", m.device, m.arrived.Sub(start), down.Sub(start), back.Sub(start))
		case !m.arrived.Before(back):
			if _, ok := first[m.device]; !ok {
				first[m.device] = m.arrived.Sub(back)
			}
		}
	}
	if len(first) != devices {
		t.Fatalf("%d of %d devices came back online after the outage", len(first), devices)
	}
	var lo, hi time.Duration = time.Hour, 0
	for _, d := range first {
		lo, hi = min(lo, d), max(hi, d)
	}
	t.Logf("reconnects after the outage: first %v, last %v after its end", lo, hi)
	// The last one waits at most the cap (plus a connect on a busy
	// machine). The spread: the first attempts after the end fall in
	// [0, 2s] with density 2(1-x/2s)/2s, so all 20 within 500 ms is less
	// likely than 1e-6; uplinks in lockstep would all come within a tick.
	if hi > backoffMax+3*time.Second {
		t.Errorf("last device back %v after the outage: want within the backoff cap %v", hi, backoffMax)
	}
	if hi-lo < backoffMax/4 {
		t.Errorf("reconnects spread over %v (%v to %v): want more than %v, full jitter over the %v cap", hi-lo, lo, hi, backoffMax/4, backoffMax)
	}
	verifyNoLoss(t, f, srv)
}

// TestAbruptCrashLastWill runs devices whose agents crash against an
// in-process hub: a crash drops the connection without a DISCONNECT, so
// the broker publishes the last will (the offline status the uplink built
// when it connected, before the crash) and the hub's registry shows the
// device offline while its agent is down; the crashed agent never says
// goodbye itself, and its uplink is gone at once, so the restarted agent
// is online again within moments; it resends from its buffer, and nothing
// is lost or duplicated.
func TestAbruptCrashLastWill(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	srv := startHub(t)
	sc := Scenario{
		Name: "crash", Devices: 10, Duration: 8 * time.Second,
		Resolution: time.Second, BoundaryGuard: 100 * time.Millisecond, DrainTimeout: 30 * time.Second,
		Classes: []DeviceClass{{Metrics: []MetricSpec{{Name: "temp", Rate: 20}},
			Crash: CrashSpec{Every: 3 * time.Second, Down: time.Second}}},
		Uplink: UplinkTuning{BackoffMin: 50 * time.Millisecond, BackoffMax: 500 * time.Millisecond, AckTimeout: 2 * time.Second},
	}
	status := watchStatus(t, srv.BrokerAddr())
	f := newTestFleet(t, srv, sc, nil)

	// Poll the hub's registry for devices shown offline, and when.
	offline := map[string][]time.Time{}
	pollCtx, stopPoll := context.WithCancel(context.Background())
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for pollCtx.Err() == nil {
			for _, d := range f.devices {
				if info, ok := srv.Device(d.name); ok && info.Status == "offline" {
					offline[d.name] = append(offline[d.name], time.Now())
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	rep, err := f.Run(context.Background())
	stopPoll()
	<-polled
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("report: %+v", rep)
	if rep.Phase != "drained" || rep.Appended == 0 || rep.Acked != rep.Appended {
		t.Fatalf("phase %s appended %d acked %d: want drained", rep.Phase, rep.Appended, rep.Acked)
	}

	start, msgs := f.runStart(), status.all()
	end := f.sc.scaled(f.sc.Duration) // agents restart, and faults stop, when the run ends
	crashes := 0
	for _, d := range f.devices {
		prev := time.Duration(0) // when the agent last started
		for _, s := range d.tl.AgentDown {
			if s.From >= end {
				break
			}
			crashAt, restartAt := start.Add(s.From), start.Add(min(s.To, end))
			// An agent up for less than this may not have connected yet;
			// a crash this close to the run's end leaves the broker no
			// time to publish its will before the messages are read.
			eligible := s.From-prev >= time.Second && restartAt.Sub(crashAt) >= 500*time.Millisecond
			prev = s.To
			if !eligible {
				continue
			}
			crashes++
			will := false
			for _, m := range msgs {
				if m.device != d.name || m.online || m.arrived.Before(crashAt) || !m.arrived.Before(restartAt) {
					continue
				}
				if !m.stamped.Before(crashAt) {
					t.Errorf("%s said goodbye at its crash at %v (offline status stamped %v)", d.name, s.From, m.stamped.Sub(start))
				}
				will = true
			}
			if !will {
				t.Errorf("%s crashed at %v: no last will before its restart at %v", d.name, s.From, s.To)
			}
			seen := slices.ContainsFunc(offline[d.name], func(at time.Time) bool {
				return !at.Before(crashAt) && at.Before(restartAt.Add(500*time.Millisecond))
			})
			if !seen {
				t.Errorf("%s crashed at %v: the hub's registry never showed it offline before its restart at %v", d.name, s.From, s.To)
			}
			// The crashed uplink is gone at once, so the restarted agent's
			// connects at once (a first attempt waits no backoff).
			back := slices.ContainsFunc(msgs, func(m statusMsg) bool {
				return m.device == d.name && m.online && !m.arrived.Before(restartAt) && m.arrived.Before(restartAt.Add(750*time.Millisecond))
			})
			if s.To < end && !back {
				t.Errorf("%s restarted at %v: not online again within 750 ms", d.name, s.To)
			}
		}
	}
	if crashes == 0 {
		t.Fatal("no crash of a connected agent in the schedule: the test checks nothing")
	}
	t.Logf("%d crashes checked, %d agent starts", crashes, rep.AgentStarts)
	verifyNoLoss(t, f, srv)
}

// TestSocketsCutAndRefuse checks the link hook a hub outage and a crash
// use: a cut connection fails reads and writes with a reset, not with the
// closed-socket error paho ignores; dials are refused at once while the
// hub is down; after a kill, a dial hangs until the uplink's life ends.
func TestSocketsCutAndRefuse(t *testing.T) {
	addr := echoServer(t)
	var hubDown atomic.Bool
	life := make(chan struct{})
	s := newSockets(linkModel{linkUp: func() bool { return true }, hubUp: func() bool { return !hubDown.Load() }}, 1, life)
	c, err := s.dial(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	read := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		read <- err
	}()
	hubDown.Store(true)
	s.cut()
	for _, err := range []error{<-read, func() error { _, err := c.Write([]byte("x")); return err }()} {
		if !errors.Is(err, syscall.ECONNRESET) || strings.Contains(err.Error(), "use of closed network connection") {
			t.Fatalf("on a cut connection: %v, want a reset paho does not take for its own close", err)
		}
	}
	at := time.Now()
	if _, err := s.dial(context.Background(), "tcp", addr); !errors.Is(err, syscall.ECONNREFUSED) || time.Since(at) > 100*time.Millisecond {
		t.Fatalf("dial while the hub is down: %v after %v, want connection refused at once", err, time.Since(at))
	}
	hubDown.Store(false)
	c, err = s.dial(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatalf("dial after the hub outage: %v", err)
	}
	s.kill()
	if _, err := c.Write([]byte("x")); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("write after a kill: %v, want a reset", err)
	}
	dialed := make(chan error, 1)
	go func() {
		_, err := s.dial(context.Background(), "tcp", addr)
		dialed <- err
	}()
	select {
	case err := <-dialed:
		t.Fatalf("dial after a kill returned %v before the uplink was stopped", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(life)
	if err := <-dialed; !errors.Is(err, errAgentGone) {
		t.Fatalf("dial after a kill: %v, want %v", err, errAgentGone)
	}
}
