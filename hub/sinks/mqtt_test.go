package sinks_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"edgeflow/hub"
	"edgeflow/hub/sinks"
	"edgeflow/internal/testbroker"
	"edgeflow/wire"
)

// mqttConsumer subscribes to a sink's topics at QoS 1 and keeps every
// message it receives, duplicates included.
type mqttConsumer struct {
	mu      sync.Mutex
	updates map[string]int // id -> times received
	events  map[string]int
	newest  map[string]windowRow // device|start -> newest (final, revision)
	bad     []string
}

func newMQTTConsumer(t *testing.T, url, topic string) *mqttConsumer {
	t.Helper()
	c := &mqttConsumer{updates: map[string]int{}, events: map[string]int{}, newest: map[string]windowRow{}}
	o := paho.NewClientOptions().AddBroker(url).SetClientID(fmt.Sprintf("consumer-%d", time.Now().UnixNano())).SetCleanSession(true)
	cl := paho.NewClient(o)
	if tok := cl.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("consumer connect: %v", tok.Error())
	}
	t.Cleanup(func() { cl.Disconnect(100) })
	tok := cl.Subscribe(topic+"/#", 1, func(_ paho.Client, m paho.Message) { c.add(m.Topic(), topic, m.Payload()) })
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("consumer subscribe: %v", tok.Error())
	}
	return c
}

func (c *mqttConsumer) add(topic, prefix string, payload []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if topic == prefix+"/events" {
		var e struct {
			ID     string `json:"id"`
			Device string `json:"device"`
			Stream string `json:"stream"`
			Seq    int64  `json:"seq"`
		}
		if err := json.Unmarshal(payload, &e); err != nil || e.ID != fmt.Sprintf("%s/%s/%d", e.Device, e.Stream, e.Seq) {
			c.bad = append(c.bad, fmt.Sprintf("event %s: %v", payload, err))
			return
		}
		c.events[e.ID]++
		return
	}
	var body struct {
		ID                      string            `json:"id"`
		Group                   map[string]string `json:"group_key"`
		Start                   time.Time         `json:"start_time"`
		Count                   int64             `json:"count"`
		Sum, Min, Max, Avg, P50 float64
		Final                   bool  `json:"final"`
		Revision                int64 `json:"revision"`
		Late                    int64 `json:"late"`
	}
	if err := json.Unmarshal(payload, &body); err != nil || body.ID == "" || topic != prefix+"/temp" {
		c.bad = append(c.bad, fmt.Sprintf("update on %s %s: %v", topic, payload, err))
		return
	}
	c.updates[body.ID]++
	if c.updates[body.ID] > 1 {
		return // a duplicate, dropped by id
	}
	k := body.Group["device"] + "|" + body.Start.UTC().Format(time.RFC3339)
	w := windowRow{Count: body.Count, Sum: body.Sum, Min: body.Min, Max: body.Max, Avg: body.Avg, P50: body.P50,
		Final: body.Final, Revision: body.Revision, Late: body.Late}
	if old, ok := c.newest[k]; !ok || w.Revision >= old.Revision {
		c.newest[k] = w
	}
}

// TestMQTTSinkAtLeastOnce runs a hub with an mqtt sink (window updates and
// events) against a real Mosquitto and the embedded broker; the hub is
// stopped mid-run and restarted, and its position on the broker is then
// deleted (a crash between the messages and the position), so the sink
// publishes everything again. The consumer receives every update at least
// once; after dropping duplicates by id it holds exactly the hub's final
// windows (newest revision each) and every accepted event once.
func TestMQTTSinkAtLeastOnce(t *testing.T) {
	for _, broker := range []string{"mosquitto", "embedded"} {
		t.Run(broker, func(t *testing.T) {
			var url string
			if broker == "mosquitto" {
				url = testbroker.StartMosquitto(t, testbroker.MosquittoOptions{}).URL()
			} else {
				url, _ = testbroker.Embedded(t)
			}
			testMQTTSink(t, url)
		})
	}
}

func testMQTTSink(t *testing.T, url string) {
	const topic = "site/a/windows"
	cons := newMQTTConsumer(t, url, topic)
	dir := t.TempDir()
	start := func() *hub.Server {
		return startSinkTestHub(t, sinkTestOptions(t, dir, sinks.Config{Name: "updates", Kind: sinks.KindMQTT, URL: url, Topic: topic, Events: true,
			Metrics: []string{"temp"}, Windows: []string{"tumbling:1m"}, GroupBy: []string{"device"}, Quantiles: []string{"p50"},
			BatchEntries: 3, PollInterval: 10 * time.Millisecond, MaxBackoff: 200 * time.Millisecond}))
	}
	srv := start()
	base := time.Now().Add(-3 * time.Hour).Truncate(time.Hour)
	at := func(i int) time.Time { return base.Add(time.Duration(i) * 2 * time.Second) }
	stream := wire.NewStreamID()
	d := newTestDevice(t, srv.BrokerAddr(), "m1", stream, 1)
	accepted := 0
	send := func(from, to int) {
		for i := from; i < to; i += 10 {
			var ts []time.Time
			for k := i; k < i+10; k++ {
				ts = append(ts, at(k))
			}
			accepted += d.send(ts)
		}
	}
	send(0, 150)
	// Stopped at once: the sink is behind and resumes after the restart.
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv = start()
	d = newTestDevice(t, srv.BrokerAddr(), "m1", stream, d.next)
	accepted += d.send([]time.Time{at(3), at(40)}) // late: revisions of final windows
	send(150, 200)
	waitCaughtUp(t, srv, base, accepted)

	check := func(phase string, wantDup bool) {
		t.Helper()
		api := readAPI(t, srv.HTTPAddr(), base.Add(-time.Hour), base.Add(time.Hour))
		cons.mu.Lock()
		defer cons.mu.Unlock()
		for _, b := range cons.bad {
			t.Errorf("%s: %s", phase, b)
		}
		for k, w := range api {
			if got, ok := cons.newest[k]; !ok {
				t.Errorf("%s: window %s: final in /v1/aggregates, never received", phase, k)
			} else if got != w {
				t.Errorf("%s: window %s: newest update %+v, API %+v", phase, k, got, w)
			}
		}
		for k := range cons.newest {
			if _, ok := api[k]; !ok {
				t.Errorf("%s: window %s: received, not a final window of /v1/aggregates", phase, k)
			}
		}
		if len(cons.events) != accepted {
			t.Errorf("%s: %d distinct events received, %d accepted", phase, len(cons.events), accepted)
		}
		dups := 0
		for _, n := range cons.updates {
			dups += n - 1
		}
		for _, n := range cons.events {
			dups += n - 1
		}
		revised := 0
		for _, w := range cons.newest {
			if w.Revision > 0 {
				revised++
			}
		}
		t.Logf("%s: %d windows (%d revised), %d update ids, %d event ids, %d duplicates", phase, len(cons.newest), revised,
			len(cons.updates), len(cons.events), dups)
		if revised < 2 {
			t.Errorf("%s: %d revised windows, want at least 2 (late events were sent)", phase, revised)
		}
		if wantDup && dups == 0 {
			t.Errorf("%s: no duplicate after the sink republished from position 0", phase)
		}
	}
	check("after the restart", false)

	// The position lost after its messages were published: everything is
	// published again under the same ids.
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	clearRetained(t, url, "edgeflow_sink_positions/updates")
	srv = start()
	waitCaughtUp(t, srv, base, accepted)
	// The consumer may still be receiving the last step's messages.
	waitFor(t, func() bool {
		cons.mu.Lock()
		defer cons.mu.Unlock()
		n := 0
		for _, c := range cons.events {
			n += c
		}
		return n >= 2*accepted
	})
	check("after the replay", true)
}

// clearRetained deletes a retained message (an empty retained publish).
func clearRetained(t *testing.T, url, topic string) {
	t.Helper()
	cl := paho.NewClient(paho.NewClientOptions().AddBroker(url).SetClientID(fmt.Sprintf("clear-%d", time.Now().UnixNano())))
	if tok := cl.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	defer cl.Disconnect(100)
	if tok := cl.Publish(topic, 1, true, []byte{}); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within 30s")
		}
	}
}

// TestSinkPastMaxLagIsBroken stops a sink's target (Mosquitto killed)
// while more than SinkMaxLag log entries arrive, lets retention delete
// them, and checks that the sink is marked broken with exactly the deleted
// positions as its gap (in its status, /v1/sinks and the metrics), that it
// does not move past them when the target is back, and that ingest goes on.
func TestSinkPastMaxLagIsBroken(t *testing.T) {
	mq := testbroker.StartMosquitto(t, testbroker.MosquittoOptions{})
	var offset atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	o := sinkTestOptions(t, t.TempDir(), sinks.Config{Name: "updates", Kind: sinks.KindMQTT, URL: mq.URL(), Events: true, Metrics: []string{"temp"},
		Windows: []string{"tumbling:1m"}, PollInterval: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond})
	o.RetentionMaxAge, o.TickInterval, o.Now, o.SinkMaxLag = time.Hour, time.Hour, now, 5
	srv := startSinkTestHub(t, o)
	base := time.Now().Add(-3 * time.Hour).Truncate(time.Hour)
	d := newTestDevice(t, srv.BrokerAddr(), "g1", wire.NewStreamID(), 1)
	accepted, i := 0, 0
	send := func(batches int) {
		for range batches {
			accepted += d.send([]time.Time{base.Add(time.Duration(i) * time.Second)})
			i++
		}
	}
	send(3)
	waitCaughtUp(t, srv, base, accepted)
	before := srv.SinkStatuses()[0].Position

	mq.Kill()
	send(20) // more than SinkMaxLag entries while the target is down
	// The lag keeps growing while the target is down: 20 entries, their
	// bytes, and the 20 s of event time between the sink's newest event
	// (base+2s) and the hub's (base+22s).
	var lag sinks.Status
	waitFor(t, func() bool {
		lag = srv.SinkStatuses()[0]
		return lag.Applied >= before+20 && lag.Lag == lag.Applied-before
	})
	t.Logf("lag while the target is down: %d entries, %d bytes, %.1f s of event time", lag.Lag, lag.LagBytes, lag.LagSeconds)
	if lag.LagBytes == 0 || lag.LagSeconds != 20 || !lag.PositionEventTime.Equal(base.Add(2*time.Second)) || !lag.AppliedEventTime.Equal(base.Add(22*time.Second)) {
		t.Errorf("lag %+v: want bytes > 0 and 20 s of event time (base+2s to base+22s)", lag)
	}
	for range 2 { // both retained checkpoints cover the entries
		if err := srv.Checkpoint(); err != nil {
			t.Fatal(err)
		}
	}
	offset.Store(int64(2 * time.Hour))
	deleted, err := srv.Retain()
	if err != nil {
		t.Fatal(err)
	}
	if deleted <= int(before) {
		t.Fatalf("retention deleted %d entries, the sink was at %d: nothing past it", deleted, before)
	}
	t.Logf("deleted %d before %d", deleted, before)
	var st sinks.Status
	waitFor(t, func() bool { st = srv.SinkStatuses()[0]; return st.Broken })
	if !st.PastMaxLag {
		t.Errorf("status %+v: past_max_lag false after a retention pass that left the sink behind", st)
	}
	if st.Gap == nil || st.Gap.From != before+1 || st.Gap.To != uint64(deleted) {
		t.Fatalf("gap %+v, want from %d to %d (the sink was at %d, retention deleted positions 1..%d)", st.Gap, before+1, deleted, before, deleted)
	}
	t.Logf("broken: %+v", st)

	send(2) // ingest goes on
	mq.Start()
	time.Sleep(500 * time.Millisecond) // the sink would have reconnected and stepped by now (MaxBackoff 100ms)
	st = srv.SinkStatuses()[0]
	if !st.Broken || st.Position != before {
		t.Errorf("after the target came back: broken %v at position %d, want broken at %d", st.Broken, st.Position, before)
	}
	resp, err := http.Get("http://" + srv.HTTPAddr() + "/v1/sinks")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := fmt.Sprintf(`"broken":true,"gap":{"from":%d,"to":%d`, before+1, deleted); !strings.Contains(string(body), want) {
		t.Errorf("/v1/sinks: %s, want %s", body, want)
	}
	resp, err = http.Get("http://" + srv.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`edgeflow_sink_broken{sink="updates"} 1`, `edgeflow_sink_errors_total{kind="gap",sink="updates"} 1`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
