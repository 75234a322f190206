package uplink

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/auth"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"

	"edgeflow/buffer"
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
	url, _ := startMochiServer(t)
	return url
}

// startMochiServer is startMochi that also returns the server.
func startMochiServer(t testing.TB) (string, *mochi.Server) {
	t.Helper()
	srv := mochi.New(&mochi.Options{Logger: quietLogger()})
	if err := srv.AddHook(new(auth.AllowHook), nil); err != nil {
		t.Fatal(err)
	}
	l := listeners.NewTCP(listeners.Config{ID: "t", Address: "127.0.0.1:0"})
	if err := srv.AddListener(l); err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve() }()
	t.Cleanup(func() { srv.Close() })
	return "tcp://" + l.Address(), srv
}

const mosquittoBin = "/usr/sbin/mosquitto"

// mosquitto is a Mosquitto process the test owns.
type mosquitto struct {
	t      testing.TB
	port   int
	conf   string
	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func startMosquitto(t testing.TB) string { return newMosquitto(t).url() }

// newMosquitto starts Mosquitto on a free loopback port, or skips the test
// if the binary is not installed.
func newMosquitto(t testing.TB) *mosquitto {
	t.Helper()
	if _, err := os.Stat(mosquittoBin); err != nil {
		t.Skipf("mosquitto not installed at %s (apt-get install mosquitto): %v", mosquittoBin, err)
	}
	m := &mosquitto{t: t, port: freePort(t), conf: filepath.Join(t.TempDir(), "mosquitto.conf")}
	conf := fmt.Sprintf("listener %d 127.0.0.1\nallow_anonymous true\npersistence false\nmax_inflight_messages 0\nmax_queued_messages 100000\n", m.port)
	if err := os.WriteFile(m.conf, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	m.start()
	t.Cleanup(m.kill)
	return m
}

func (m *mosquitto) url() string { return "tcp://127.0.0.1:" + strconv.Itoa(m.port) }

// start runs the process and waits until the port accepts connections.
func (m *mosquitto) start() {
	m.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		cmd := exec.Command(mosquittoBin, "-c", m.conf)
		cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
		if err := cmd.Start(); err != nil {
			m.t.Fatalf("start mosquitto: %v", err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		for time.Now().Before(deadline) {
			select {
			case <-exited:
			default:
				c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(m.port), 100*time.Millisecond)
				if err != nil {
					time.Sleep(20 * time.Millisecond)
					continue
				}
				c.Close()
				m.mu.Lock()
				m.cmd, m.exited = cmd, exited
				m.mu.Unlock()
				return
			}
			break // exited (port still held by the old process?): try again
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			m.t.Fatalf("mosquitto did not come up on port %d", m.port)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// kill stops the process with SIGKILL: a crash, not a clean shutdown.
func (m *mosquitto) kill() {
	m.mu.Lock()
	cmd, exited := m.cmd, m.exited
	m.cmd = nil
	m.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			m.t.Errorf("mosquitto (pid %d) did not exit after SIGKILL", cmd.Process.Pid)
		}
	}
}

// openStream opens a fresh buffer stream for device.
func openStream(t testing.TB, device string) (*buffer.Store, *buffer.Stream) {
	t.Helper()
	s, err := buffer.Open(t.TempDir(), buffer.Options{Logger: quietLogger(), Durability: buffer.DurabilityNone})
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
