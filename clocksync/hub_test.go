package clocksync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"edgeflow/internal/testbroker"
	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// fakeHub answers time requests in memory from a reference clock, with a
// real (sleeping) delay on the way out and back.
type fakeHub struct {
	ref   *refClock
	delay time.Duration
	lie   func(*wirepb.TimeResponse)
	calls atomic.Int64
}

func (h *fakeHub) Exchange(ctx context.Context, req *wirepb.TimeRequest) (*wirepb.TimeResponse, time.Time, error) {
	h.calls.Add(1)
	h.wait()
	resp := &wirepb.TimeResponse{RequestId: req.RequestId, T1Ns: req.T1Ns, T2Ns: h.ref.Now().UnixNano()}
	resp.T3Ns = h.ref.Now().UnixNano()
	if h.lie != nil {
		h.lie(resp)
	}
	h.wait()
	return resp, h.ref.dev.Wall(), nil
}

// wait is one leg of the exchange: virtual on a frozen device clock.
func (h *fakeHub) wait() {
	if h.ref.dev.frozen {
		h.ref.dev.Advance(h.delay)
		return
	}
	time.Sleep(h.delay)
}

func TestHubFallback(t *testing.T) {
	dev := newSimClock(day0)
	ref := newRef(dev, -90*time.Minute, -60)
	dead := startNTP(t, ref.Now, 0)
	dead.mode.Store(int32(modeDrop))
	hub := &fakeHub{ref: ref, delay: time.Millisecond}
	c := newTestClock(t, dev, []string{dead.addr}, func(o *Options) {
		o.Hub = hub
		o.QueryTimeout = 20 * time.Millisecond
	})
	pollN(t, c, dev, 10, 64*time.Second)
	e := checkContains(t, c, ref, 20*time.Millisecond)
	if e.Method != wirepb.TimeMethod_TIME_METHOD_HUB_SYNC || e.Source != "hub" {
		t.Errorf("method %v source %q, want HUB_SYNC from hub", e.Method, e.Source)
	}
	if hub.calls.Load() != 10 {
		t.Errorf("hub asked %d times, want 10", hub.calls.Load())
	}

	// Once NTP answers again, the hub is left alone and the source is NTP.
	dead.mode.Store(int32(modeNormal))
	pollN(t, c, dev, 3, 64*time.Second)
	e = checkContains(t, c, ref, 20*time.Millisecond)
	if e.Method != wirepb.TimeMethod_TIME_METHOD_NTP || hub.calls.Load() != 10 {
		t.Errorf("method %v, hub calls %d", e.Method, hub.calls.Load())
	}
}

func TestHubSampleChecks(t *testing.T) {
	w1 := day0
	m1 := 10 * time.Second
	req := &wirepb.TimeRequest{RequestId: 7, T1Ns: w1.UnixNano()}
	ok := func() *wirepb.TimeResponse {
		return &wirepb.TimeResponse{RequestId: 7, T1Ns: req.T1Ns, T2Ns: w1.UnixNano() + 5e9 + 1e6, T3Ns: w1.UnixNano() + 5e9 + 2e6}
	}
	t4 := w1.Add(3 * time.Millisecond)
	m4 := m1 + 3*time.Millisecond
	s, err := hubSample(req, ok(), w1, m1, t4, m4, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// t2-t1 = 5.001 s, t3-t4 = 4.999 s: offset 5 s, delay 2 ms.
	if want := w1.UnixNano() - int64(m1) + 5e9; s.boot != want || s.delay != 2*time.Millisecond || s.bound != time.Millisecond {
		t.Errorf("sample %+v, want boot %d delay 2ms bound 1ms", s, want)
	}
	for _, tc := range []struct {
		name   string
		mutate func(*wirepb.TimeResponse)
		t4     time.Time
		want   error
	}{
		{"other request", func(r *wirepb.TimeResponse) { r.RequestId = 8 }, t4, ErrBadTimeResponse},
		{"other t1", func(r *wirepb.TimeResponse) { r.T1Ns++ }, t4, ErrBadTimeResponse},
		{"t3 before t2", func(r *wirepb.TimeResponse) { r.T3Ns = r.T2Ns - 1 }, t4, ErrBadTimeResponse},
		{"held longer than the round trip", func(r *wirepb.TimeResponse) { r.T3Ns = r.T2Ns + 1e9 }, t4, ErrBadTimeResponse},
		{"t4 before t1", nil, w1.Add(-time.Millisecond), ErrBadTimeResponse},
		{"t4 beyond the monotonic round trip", nil, w1.Add(time.Second), ErrBadTimeResponse},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ok()
			if tc.mutate != nil {
				tc.mutate(r)
			}
			if _, err := hubSample(req, r, w1, m1, tc.t4, m4, time.Second); !errors.Is(err, tc.want) {
				t.Errorf("err = %v, want %v", err, tc.want)
			}
		})
	}
}

// startBroker runs an embedded mochi broker on a free loopback port.
func startBroker(t testing.TB) string {
	url, _ := testbroker.Embedded(t)
	return url
}

func connect(t testing.TB, broker, id string) mqtt.Client {
	t.Helper()
	o := mqtt.NewClientOptions().AddBroker(broker).SetClientID(id).SetConnectTimeout(5 * time.Second).SetAutoReconnect(false)
	c := mqtt.NewClient(o)
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connect %s: %v", id, tok.Error())
	}
	t.Cleanup(func() { c.Disconnect(100) })
	return c
}

// respond makes client answer every device's time requests from ref, as
// the hub's TimeService does.
func respond(t testing.TB, client mqtt.Client, now func() time.Time) {
	t.Helper()
	tok := client.Subscribe(wire.AllTimeReqs, 0, func(c mqtt.Client, m mqtt.Message) {
		t2 := now().UnixNano()
		req, err := wire.DecodeTimeRequest(m.Payload(), wire.Limits{})
		if err != nil {
			return
		}
		dev, _, _ := wire.ParseTopic(m.Topic())
		resp := &wirepb.TimeResponse{RequestId: req.RequestId, T1Ns: req.T1Ns, T2Ns: t2}
		resp.T3Ns = now().UnixNano()
		b, _ := wire.EncodeTimeResponse(resp)
		c.Publish(wire.TimeRespTopic(dev), 0, false, b)
	})
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
}

func TestMQTTHub(t *testing.T) {
	broker := startBroker(t)
	dev := newSimClock(day0)
	ref := newRef(dev, 42*time.Second, 25)
	respond(t, connect(t, broker, "hub"), ref.Now)
	agent := connect(t, broker, "dev-1")
	h, err := NewMQTTHub(agent, "dev-1", dev.Wall, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	c := newTestClock(t, dev, nil, func(o *Options) { o.Hub = h })
	for range 5 {
		if err := c.Poll(context.Background()); err != nil {
			t.Fatal(err)
		}
		checkContains(t, c, ref, 50*time.Millisecond)
		dev.Advance(10 * time.Second)
	}
	if e := c.Estimate(); e.Method != wirepb.TimeMethod_TIME_METHOD_HUB_SYNC {
		t.Errorf("method %v, want HUB_SYNC", e.Method)
	}

	// An answer that never arrives ends the exchange with ctx. (Marking
	// the exchanger subscribed without subscribing drops every answer.)
	h2, _ := NewMQTTHub(agent, "dev-2", dev.Wall, nil)
	h2.subscribed = true
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, _, err := h2.Exchange(ctx, &wirepb.TimeRequest{RequestId: 1, T1Ns: 1}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Exchange without an answer = %v, want DeadlineExceeded", err)
	}
}

func TestNewMQTTHubChecks(t *testing.T) {
	if _, err := NewMQTTHub(nil, "d", nil, nil); err == nil {
		t.Error("nil client accepted")
	}
	broker := startBroker(t)
	c := connect(t, broker, "x")
	if _, err := NewMQTTHub(c, "bad/id", nil, nil); err == nil {
		t.Error("bad device id accepted")
	}
}

// FuzzMQTTHubHandle feeds arbitrary payloads to the response handler: it
// must never panic, and must deliver only a well-formed answer to a
// pending request.
func FuzzMQTTHubHandle(f *testing.F) {
	good, _ := wire.EncodeTimeResponse(&wirepb.TimeResponse{RequestId: 1, T1Ns: 2, T2Ns: 3, T3Ns: 4})
	f.Add(good)
	f.Add([]byte{})
	f.Add([]byte{0xE7, 1, 1, 4, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add(append([]byte{0xE7, 1, 0, 4}, []byte("\x08\x01\x10")...))
	f.Fuzz(func(t *testing.T, payload []byte) {
		h := &MQTTHub{device: "d", now: time.Now, log: slog.New(slog.DiscardHandler), pending: map[uint64]chan hubReply{}}
		ch := make(chan hubReply, 1)
		h.pending[1] = ch
		delivered := h.handle(payload, time.Now())
		if delivered {
			r := <-ch
			if r.resp == nil || r.resp.RequestId != 1 {
				t.Fatalf("delivered %+v", r.resp)
			}
			if _, err := wire.DecodeTimeResponse(payload, wire.Limits{}); err != nil {
				t.Fatalf("delivered a payload that does not decode: %v", err)
			}
		}
		if len(h.pending) > 1 {
			t.Fatal(fmt.Sprint("pending grew: ", len(h.pending)))
		}
	})
}
