package timeservice

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"edgeflow/clocksync"
	"edgeflow/internal/testbroker"
	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// tsRecorder is a publish function that keeps what it was given.
type tsRecorder struct {
	mu     sync.Mutex
	topics []string
	msgs   [][]byte
	err    error
}

func (r *tsRecorder) publish(topic string, payload []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return r.err
	}
	r.topics = append(r.topics, topic)
	r.msgs = append(r.msgs, append([]byte(nil), payload...))
	return nil
}

// tsTicker is a clock that advances 1 ms per reading.
func tsTicker() func() time.Time {
	var mu sync.Mutex
	t := time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		t = t.Add(time.Millisecond)
		return t
	}
}

func TestTimeServiceRespond(t *testing.T) {
	rec := &tsRecorder{}
	svc, err := NewTimeService(tsTicker(), rec.publish, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	req, _ := wire.EncodeTimeRequest(&wirepb.TimeRequest{RequestId: 42, T1Ns: 123})
	if err := svc.Respond(wire.TimeReqTopic("dev-1"), req); err != nil {
		t.Fatal(err)
	}
	if len(rec.topics) != 1 || rec.topics[0] != wire.TimeRespTopic("dev-1") {
		t.Fatalf("published to %v", rec.topics)
	}
	resp, err := wire.DecodeTimeResponse(rec.msgs[0], wire.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if resp.RequestId != 42 || resp.T1Ns != 123 || resp.T3Ns-resp.T2Ns != int64(time.Millisecond) {
		t.Errorf("response %+v: want id 42, t1 123, t3 one reading after t2", resp)
	}

	for _, tc := range []struct {
		name    string
		topic   string
		payload []byte
	}{
		{"response topic", wire.TimeRespTopic("dev-1"), req},
		{"batch topic", wire.BatchTopic("dev-1"), req},
		{"foreign topic", "other/dev-1/time/req", req},
		{"bad device id", "edge/v1/a+b/time/req", req},
		{"empty payload", wire.TimeReqTopic("dev-1"), nil},
		{"garbage", wire.TimeReqTopic("dev-1"), []byte("hello")},
		{"a response frame", wire.TimeReqTopic("dev-1"), rec.msgs[0]},
		{"oversized", wire.TimeReqTopic("dev-1"), append(append([]byte{}, req...), make([]byte, 8<<10)...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := svc.Respond(tc.topic, tc.payload); !errors.Is(err, ErrBadTimeRequest) {
				t.Errorf("Respond = %v, want ErrBadTimeRequest", err)
			}
		})
	}
	if len(rec.topics) != 1 {
		t.Errorf("bad requests were answered: %v", rec.topics)
	}

	rec.err = errors.New("broker down")
	if err := svc.Respond(wire.TimeReqTopic("dev-1"), req); err == nil || errors.Is(err, ErrBadTimeRequest) {
		t.Errorf("publish failure: %v", err)
	}
	svc.HandleRequest(wire.TimeReqTopic("dev-1"), req) // logs, does not panic
	if _, err := NewTimeService(nil, nil, nil); err == nil {
		t.Error("nil publish accepted")
	}
}

// FuzzTimeServiceHandleRequest: any topic and payload either gets one
// well-formed answer on the device's response topic or an error, never a
// panic.
func FuzzTimeServiceHandleRequest(f *testing.F) {
	req, _ := wire.EncodeTimeRequest(&wirepb.TimeRequest{RequestId: 1, T1Ns: 2})
	f.Add(wire.TimeReqTopic("d"), req)
	f.Add(wire.TimeReqTopic("d"), []byte{})
	f.Add(wire.TimeReqTopic("d"), []byte{0xE7, 1, 1, 3, 0xff, 0xff, 0x03})
	f.Add("edge/v1/d/time/resp", req)
	f.Add(wire.TimeReqTopic("d"), append([]byte{0xE7, 1, 0, 3}, 0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01))
	f.Fuzz(func(t *testing.T, topic string, payload []byte) {
		rec := &tsRecorder{}
		svc, _ := NewTimeService(tsTicker(), rec.publish, slog.New(slog.DiscardHandler))
		err := svc.Respond(topic, payload)
		if err != nil {
			if len(rec.msgs) != 0 {
				t.Fatalf("answered and failed: %v", err)
			}
			return
		}
		dev, kind, perr := wire.ParseTopic(topic)
		if perr != nil || kind != wire.KindTimeReq || len(rec.msgs) != 1 || rec.topics[0] != wire.TimeRespTopic(dev) {
			t.Fatalf("answered %q on %v", topic, rec.topics)
		}
		in, _ := wire.DecodeTimeRequest(payload, wire.Limits{})
		out, err := wire.DecodeTimeResponse(rec.msgs[0], wire.Limits{})
		if err != nil || out.RequestId != in.RequestId || out.T1Ns != in.T1Ns || out.T3Ns < out.T2Ns {
			t.Fatalf("answer %+v to %+v: %v", out, in, err)
		}
	})
}

// tsBroker runs an embedded mochi broker on a free loopback port.
func tsBroker(t testing.TB) string {
	url, _ := testbroker.Embedded(t)
	return url
}

func tsConnect(t testing.TB, broker, id string) paho.Client {
	t.Helper()
	c := paho.NewClient(paho.NewClientOptions().AddBroker(broker).SetClientID(id).SetAutoReconnect(false))
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connect %s: %v", id, tok.Error())
	}
	t.Cleanup(func() { c.Disconnect(100) })
	return c
}

// TestTimeServiceOverMQTT runs the responder behind a real broker and an
// agent's clocksync.Clock that has only the hub as a time source: the
// agent's estimate must hold the hub's true offset (7 s ahead).
func TestTimeServiceOverMQTT(t *testing.T) {
	broker := tsBroker(t)
	const hubAhead = 7 * time.Second
	hubClient := tsConnect(t, broker, "hub")
	svc, err := NewTimeService(func() time.Time { return time.Now().Add(hubAhead) }, func(topic string, payload []byte) error {
		tok := hubClient.Publish(topic, 0, false, payload)
		tok.Wait()
		return tok.Error()
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if tok := hubClient.Subscribe(wire.AllTimeReqs, 0, func(_ paho.Client, m paho.Message) {
		svc.HandleRequest(m.Topic(), m.Payload())
	}); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}

	agent := tsConnect(t, broker, "dev-7")
	ex, err := clocksync.NewMQTTHub(agent, "dev-7", time.Now, nil)
	if err != nil {
		t.Fatal(err)
	}
	clk, err := clocksync.New(clocksync.Options{Hub: ex, BootID: "b", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if err := clk.Poll(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	e := clk.Estimate()
	if e.Method != wirepb.TimeMethod_TIME_METHOD_HUB_SYNC {
		t.Fatalf("estimate %+v, want HUB_SYNC", e)
	}
	// The device's wall and monotonic clocks are the host's: the true
	// offset is exactly hubAhead (host clock slewing over a second is
	// far below the bound).
	if err := (e.Offset - hubAhead).Abs(); err > e.Uncertainty || e.Uncertainty > 50*time.Millisecond {
		t.Errorf("offset %v ± %v, want %v", e.Offset, e.Uncertainty, hubAhead)
	}
}
