package uplink

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"

	"edgeflow/buffer"
	"edgeflow/internal/testbroker"
	"edgeflow/wire/wirepb"
)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// testLogger logs warnings and up through t.Log, which helps when a
// scenario fails.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

// broker is a broker a test runs against.
type broker struct {
	name  string
	start func(t testing.TB) string // returns the URL
}

var brokers = []broker{{"mochi", startMochi}, {"mosquitto", startMosquitto}}

// startMochi runs the embedded broker on a port chosen at run time.
func startMochi(t testing.TB) string {
	t.Helper()
	url, _ := testbroker.Embedded(t)
	return url
}

// startMosquitto runs a real Mosquitto (without persistence) on a free port.
func startMosquitto(t testing.TB) string { return newMosquitto(t).URL() }

func newMosquitto(t testing.TB) *testbroker.Mosquitto {
	return testbroker.StartMosquitto(t, testbroker.MosquittoOptions{})
}

// openStream opens a fresh buffer stream for device.
func openStream(t testing.TB, device string) (*buffer.Store, *buffer.Stream) {
	t.Helper()
	return openStreamWith(t, device, buffer.CompressS2)
}

// openStreamWith is openStream with the buffer's blocks in the given form.
func openStreamWith(t testing.TB, device string, blocks buffer.BlockCompression) (*buffer.Store, *buffer.Stream) {
	t.Helper()
	s, err := buffer.Open(t.TempDir(), buffer.Options{Logger: quietLogger(), Durability: buffer.DurabilityNone, BlockCompression: blocks})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	st, err := s.Stream(device, buffer.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s, st
}

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// event encodes the event for sequence number seq: value = seq, so the
// responder can check every event arrived where it belongs. About 40 bytes.
func event(seq uint64) []byte {
	b, err := proto.Marshal(&wirepb.Event{
		Metric: "temp", Value: float64(seq), DeviceTimeNs: t0.UnixNano() + int64(seq)*int64(time.Millisecond),
		MonoNs: int64(seq) * 1000, BootId: "b1", Method: wirepb.TimeMethod_TIME_METHOD_NTP,
	})
	if err != nil {
		panic(err)
	}
	return b
}

// appendEvents appends n events in appends of at most chunk.
func appendEvents(t testing.TB, st *buffer.Stream, n, chunk int) {
	t.Helper()
	for n > 0 {
		k := min(n, chunk)
		next := st.Stats().Next
		recs := make([][]byte, k)
		for i := range recs {
			recs[i] = event(next + uint64(i))
		}
		if _, err := st.Append(context.Background(), recs); err != nil {
			t.Fatal(err)
		}
		n -= k
	}
}

// waitFor polls cond until it holds or the timeout passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// value reads a counter or gauge (optionally one child of a vector).
func value(c prometheus.Collector) float64 {
	ch := make(chan prometheus.Metric, 64)
	c.Collect(ch)
	close(ch)
	sum := 0.0
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			panic(err)
		}
		switch {
		case d.Counter != nil:
			sum += d.Counter.GetValue()
		case d.Gauge != nil:
			sum += d.Gauge.GetValue()
		case d.Histogram != nil:
			sum += float64(d.Histogram.GetSampleCount())
		}
	}
	return sum
}

// runUplink starts u.Run and stops it in cleanup, failing on an error.
func runUplink(t testing.TB, u *Uplink) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- u.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("run: %v", err)
				}
			case <-time.After(15 * time.Second):
				t.Errorf("run did not return after cancel")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// newUplink builds an Uplink with test-friendly timings.
func newUplink(t testing.TB, st *buffer.Stream, url string, tweak func(*Options)) *Uplink {
	t.Helper()
	o := Options{
		DeviceID: st.Name(), Brokers: []string{url},
		MaxBatchEvents: 500, Window: 4, Linger: NoLinger,
		AckTimeout: 2 * time.Second, BackoffMin: 20 * time.Millisecond, BackoffMax: 500 * time.Millisecond,
		PollInterval: 10 * time.Millisecond, ConnectTimeout: 2 * time.Second, KeepAlive: 5 * time.Second,
		Logger: testLogger(t),
	}
	if tweak != nil {
		tweak(&o)
	}
	u, err := New(st, o)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// dialTest connects a plain paho client for a test's own use. Its
// handlers must be quick (OrderMatters keeps arrival order).
func dialTest(t testing.TB, url, id string, onConnect func(mqtt.Client)) mqtt.Client {
	t.Helper()
	o := mqtt.NewClientOptions().AddBroker(url).SetClientID(id).SetCleanSession(true).
		SetOrderMatters(true).SetAutoReconnect(true).SetConnectRetry(true).
		SetConnectRetryInterval(50 * time.Millisecond).SetMaxReconnectInterval(200 * time.Millisecond).
		SetKeepAlive(5 * time.Second)
	if onConnect != nil {
		o.SetOnConnectHandler(onConnect)
	}
	c := mqtt.NewClient(o)
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("test client connect: %v", tok.Error())
	}
	t.Cleanup(func() { c.Disconnect(100) })
	return c
}

// streamIDOf is a helper for building acks in tests.
func streamIDOf(st *buffer.Stream) []byte { id := st.ID(); return id[:] }

// readBatch reads the next batch from the buffer and encodes it, or
// returns nil if there is none to send yet (readBatches for one batch).
func (u *Uplink) readBatch(now time.Time) (*flight, error) {
	fs, err := u.readBatches(now, 1)
	if len(fs) == 0 {
		return nil, err
	}
	return fs[0], err
}
