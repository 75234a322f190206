package hub

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"

	"edgeflow/buffer"
	"edgeflow/hub/cluster"
	"edgeflow/hub/hubapi"
	"edgeflow/hub/natslog"
	"edgeflow/internal/testnats"
	"edgeflow/uplink"
	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// clusterWithin bounds every wait of the cluster tests; a failure says
// what it waited for.
const clusterWithin = 90 * time.Second

// clusterOptions are aggTestOptions in cluster mode on c's servers, with a
// counting consumer.
func clusterOptions(t testing.TB, dir string, c *testnats.Cluster, replicas int) (Options, *countingConsumer) {
	o := aggTestOptions(t, dir)
	o.MQTTListen = ""
	o.Workers = 3
	// Partition checkpoints only at handoffs: a hub stopped as if it
	// crashed then leaves none newer than the state it had at its start,
	// and the next hub's start does not depend on when one was saved.
	o.NATS = cluster.Options{URLs: strings.Split(c.URLs(), ","), Log: natslog.Options{Partitions: 8, Replicas: replicas},
		CheckpointEvery: 1 << 30, CheckpointInterval: time.Hour}
	cc := newCountingConsumer()
	o.Consumers = []Consumer{cc}
	return o, cc
}

// clusterAgent is one device running the agent's own uplink over a real
// buffer against the NATS servers' MQTT listeners.
type clusterAgent struct {
	id     string
	st     *buffer.Stream
	next   int // events appended so far
	sent   []sentEvent
	cancel context.CancelFunc
	done   chan struct{}
}

// startClusterAgents runs one agent per id, sending up to maxBatch events
// a batch; a device id with a dot gets a
// client id without one (NATS refuses it).
func startClusterAgents(t testing.TB, c *testnats.Cluster, ids []string, maxBatch int) []*clusterAgent {
	store, err := buffer.Open(t.TempDir(), buffer.Options{Durability: buffer.DurabilityNone})
	if err != nil {
		t.Fatal(err)
	}
	var brokers []string
	for _, n := range c.Nodes {
		brokers = append(brokers, n.MQTTURL())
	}
	var agents []*clusterAgent
	for i, id := range ids {
		st, err := store.Stream(id, buffer.StreamOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// Each agent starts on another server and fails over to the rest.
		order := append(append([]string(nil), brokers[i%len(brokers):]...), brokers[:i%len(brokers)]...)
		u, err := uplink.New(st, uplink.Options{DeviceID: id, ClientID: "edgeflow-" + strings.ReplaceAll(id, ".", "-"),
			Brokers: order, MaxBatchEvents: maxBatch, AckTimeout: 2 * time.Second, BackoffMin: 50 * time.Millisecond, BackoffMax: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		a := &clusterAgent{id: id, st: st, cancel: cancel, done: make(chan struct{})}
		go func() { defer close(a.done); _ = u.Run(ctx) }()
		agents = append(agents, a)
	}
	t.Cleanup(func() {
		for _, a := range agents {
			a.cancel()
			<-a.done
		}
		store.Close()
	})
	return agents
}

// appendEvents appends n events of one a second of event time from base
// (modulo 50 minutes),
// as the agent's ingest does, and records them as sent.
func (a *clusterAgent) appendEvents(t testing.TB, base time.Time, n int) {
	recs := make([][]byte, n)
	for j := range recs {
		i := a.next + j + 1
		// Event times stay within 50 minutes of base, which the
		// queries cover, however many events a test sends.
		ts := base.Add(time.Duration(i%3000) * time.Second).UnixNano()
		v := float64((i*7+len(a.id)*13)%101) - 20
		b, err := proto.Marshal(&wirepb.Event{Metric: "temp", Value: v, DeviceTimeNs: ts, MonoNs: int64(i) * 1000, BootId: "b1",
			Method: wirepb.TimeMethod_TIME_METHOD_NTP, Tags: []*wirepb.Tag{{Key: "room", Value: "r1"}}})
		if err != nil {
			t.Fatal(err)
		}
		recs[j] = b
		a.sent = append(a.sent, sentEvent{a.id, ts, v})
	}
	if _, err := a.st.Append(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
	a.next += n
}

// waitAcked waits until every agent's buffer has every appended event
// acknowledged: the hub's acks came back through NATS.
func waitAcked(t testing.TB, agents []*clusterAgent, what string) {
	t.Helper()
	deadline := time.Now().Add(clusterWithin)
	for _, a := range agents {
		for a.st.Stats().Acked < uint64(a.next) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %s has %d of %d events acknowledged after %v", what, a.id, a.st.Stats().Acked, a.next, clusterWithin)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// checkExactlyOnce checks that the consumer was given every sent event
// exactly once (each device has one stream here).
func checkExactlyOnce(t testing.TB, cc *countingConsumer, agents []*clusterAgent, what string) {
	t.Helper()
	cc.mu.Lock()
	defer cc.mu.Unlock()
	got := map[string]*countState{}
	for k, s := range cc.Streams {
		dev, _, _ := strings.Cut(k, "/")
		if got[dev] != nil {
			t.Fatalf("%s: device %s has two streams", what, dev)
		}
		got[dev] = s
	}
	for _, a := range agents {
		s := got[a.id]
		if s == nil {
			t.Fatalf("%s: nothing applied of %s", what, a.id)
		}
		if s.Twice != 0 || s.Events != uint64(a.next) || s.Seen.Len() != 1 || !s.Seen.Covers(1, uint64(a.next)) {
			t.Fatalf("%s: %s: %d events applied (%d twice), ranges %v; want 1..%d once", what, a.id, s.Events, s.Twice, s.Seen, a.next)
		}
	}
}

// waitAllApplied waits until the consumer holds every sent event.
func waitAllApplied(t testing.TB, cc *countingConsumer, agents []*clusterAgent, what string) {
	t.Helper()
	deadline := time.Now().Add(clusterWithin)
	for {
		cc.mu.Lock()
		var n, want uint64
		for _, s := range cc.Streams {
			n += s.Events
		}
		cc.mu.Unlock()
		for _, a := range agents {
			want += uint64(a.next)
		}
		if n >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d of %d events applied after %v", what, n, want, clusterWithin)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkClusterState checks what a hub serves against what the agents
// sent: every device in /v1/devices, every window equal to the brute-force
// answer.
func checkClusterState(t *testing.T, s *Server, agents []*clusterAgent, base time.Time, what string) {
	t.Helper()
	// The API answers for the whole fleet through the leases: a crashed
	// earlier hub's leases expire first (a single hub then owns all).
	waitUntil(t, what+": this hub owns every partition", func() bool {
		return s.LeaseManager() != nil && len(owned(s)) == s.opts.NATS.Log.Partitions
	})
	var r hubapi.DevicesResponse
	if code, body := getJSON(t, s.Handler(), "/v1/devices", &r); code != 200 {
		t.Fatalf("%s: /v1/devices: %d %s", what, code, body)
	}
	have := map[string]bool{}
	for _, d := range r.Devices {
		have[d.ID] = true
	}
	var sent []sentEvent
	for _, a := range agents {
		if !have[a.id] {
			t.Fatalf("%s: /v1/devices lacks %s: %+v", what, a.id, r.Devices)
		}
		sent = append(sent, a.sent...)
	}
	waitCountWithin(t, s, base, uint64(len(sent)))
	checkBrute(t, s.Handler(), sent, base)
}

// waitCountWithin is waitCount with the cluster tests' bound.
func waitCountWithin(t *testing.T, s *Server, base time.Time, want uint64) {
	t.Helper()
	waitCountFor(t, s, base, want, clusterWithin)
}

// startClusterHub starts a hub and returns it with a stop func that is
// safe to call twice; crash makes the stop skip the final checkpoint.
func startClusterHub(t testing.TB, o Options) (*Server, func(crash bool)) {
	t.Helper()
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterWithin)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		_ = s.Shutdown(context.Background())
		t.Fatal(err)
	}
	var once sync.Once
	stop := func(crash bool) {
		once.Do(func() {
			s.skipFinalCheckpoint, s.crashLeases = crash, crash
			if err := s.Shutdown(context.Background()); err != nil {
				t.Errorf("shutdown: %v", err)
			}
		})
	}
	t.Cleanup(func() { stop(false) })
	return s, stop
}

// TestClusterAgentsExactlyOnce runs hubd's cluster mode against one NATS
// server: the agents' own uplinks deliver through NATS' MQTT listener, the
// hub reads the stream and its acks reach the agents. Every event is
// applied exactly once, /v1/devices lists every device and every window
// equals the brute-force answer. The hub then stops as if it crashed after
// its last commit, the agents keep producing, and a hub on the same data
// directory resumes at its committed positions: still exactly once. A hub
// on an empty data directory replays the stream from its start to the
// same state.
func TestClusterAgentsExactlyOnce(t *testing.T) {
	c := testnats.Start(t, 1)
	dir := t.TempDir()
	o, cc := clusterOptions(t, dir, c, 1)
	s, stop := startClusterHub(t, o)
	ids := []string{"dev-1", "dev-2", "site.3", "dev-4", "dev-5"}
	agents := startClusterAgents(t, c, ids, 40)
	base := time.Now().Add(-2 * time.Hour).Truncate(time.Hour)
	for _, a := range agents {
		a.appendEvents(t, base, 300)
	}
	waitAcked(t, agents, "first run")
	waitAllApplied(t, cc, agents, "first run")
	checkExactlyOnce(t, cc, agents, "first run")
	checkClusterState(t, s, agents, base, "first run")

	l := s.cl.Log()
	f, err := l.Fullness(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	stop(true)

	// Events appended while no hub runs wait in the stream or the agents.
	for _, a := range agents {
		a.appendEvents(t, base, 200)
	}
	o2, cc2 := clusterOptions(t, dir, c, 1)
	s2, stop2 := startClusterHub(t, o2)
	var resumed uint64
	for _, seq := range s2.cl.from {
		resumed = max(resumed, seq)
	}
	if resumed != f.LastSeq {
		t.Fatalf("restarted hub resumes after sequence %d, want the stream's last sequence %d at the stop", resumed, f.LastSeq)
	}
	waitAcked(t, agents, "after restart")
	waitAllApplied(t, cc2, agents, "after restart")
	checkExactlyOnce(t, cc2, agents, "after restart")
	checkClusterState(t, s2, agents, base, "after restart")
	stop2(false)

	// An empty data directory: the hub before it handed every partition
	// over with a final checkpoint, so this one imports them (into the
	// engine and the registry; the generic consumers see only what it
	// applies from the stream) and reads the stream after them: the same
	// state, and every later event applied once.
	o3, cc3 := clusterOptions(t, t.TempDir(), c, 1)
	s3, _ := startClusterHub(t, o3)
	if len(s3.cl.from) != 0 {
		t.Fatalf("a hub on an empty data directory has positions %v", s3.cl.from)
	}
	waitUntil(t, "the hub on an empty data directory caught up", func() bool { return s3.NotReadyReason() == "" })
	checkClusterState(t, s3, agents, base, "empty data directory")
	for _, a := range agents {
		a.appendEvents(t, base, 100)
	}
	waitAcked(t, agents, "empty data directory")
	checkClusterState(t, s3, agents, base, "empty data directory, after more events")
	cc3.mu.Lock()
	defer cc3.mu.Unlock()
	var n, twice uint64
	for _, st := range cc3.Streams {
		n, twice = n+st.Events, twice+st.Twice
	}
	if n != uint64(100*len(agents)) || twice != 0 {
		t.Fatalf("empty data directory: the consumer was given %d events after the takeover (%d twice), want %d once", n, twice, 100*len(agents))
	}
}

// produce appends n events to every agent every interval until stop is
// closed; the returned channel closes when it has stopped.
func produce(t *testing.T, agents []*clusterAgent, base time.Time, n int, interval time.Duration, stop <-chan struct{}) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			for _, a := range agents {
				a.appendEvents(t, base, n)
			}
			select {
			case <-stop:
				return
			case <-time.After(interval):
			}
		}
	}()
	return done
}

// waitUntil polls cond every 20 ms until it holds, failing with what after
// clusterWithin.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(clusterWithin)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", clusterWithin, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestClusterNATSServerKilled runs the hub against three NATS servers
// with a replicated stream; under load from agents spread over the
// servers, one server is SIGKILLed and later restarted. The agents fail
// over and resend what stays unanswered; every event is applied exactly
// once and the windows equal the brute-force answer.
func TestClusterNATSServerKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out NATS failures for seconds; runs without -short")
	}
	c := testnats.Start(t, 3)
	o, cc := clusterOptions(t, t.TempDir(), c, 3)
	s, _ := startClusterHub(t, o)
	agents := startClusterAgents(t, c, []string{"dev-1", "dev-2", "site.3", "dev-4", "dev-5", "dev-6"}, 40)
	base := time.Now().Add(-2 * time.Hour).Truncate(time.Hour)
	stop := make(chan struct{})
	stopped := produce(t, agents, base, 10, 20*time.Millisecond, stop)
	waitUntil(t, "the hub applies events before the kill", func() bool { return s.m != nil && appliedEvents(cc) > 200 })
	c.Kill(0)
	before := appliedEvents(cc)
	waitUntil(t, "the hub applies events with a server down", func() bool { return appliedEvents(cc) > before+500 })
	c.Restart(0)
	after := appliedEvents(cc)
	waitUntil(t, "the hub applies events after the restart", func() bool { return appliedEvents(cc) > after+200 })
	close(stop)
	<-stopped
	waitAcked(t, agents, "after the kill")
	waitAllApplied(t, cc, agents, "after the kill")
	checkExactlyOnce(t, cc, agents, "after the kill")
	checkClusterState(t, s, agents, base, "after the kill")
}

// appliedEvents is how many events the consumer was given.
func appliedEvents(cc *countingConsumer) uint64 {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	var n uint64
	for _, s := range cc.Streams {
		n += s.Events
	}
	return n
}

// TestClusterReadyzFollowsNATS: while the only NATS server is down
// /readyz answers 503 naming NATS, and queries are still served; once the
// server is back the hub is ready again, reads on and acknowledges what
// the agents sent.
func TestClusterReadyzFollowsNATS(t *testing.T) {
	c := testnats.Start(t, 1)
	o, cc := clusterOptions(t, t.TempDir(), c, 1)
	s, _ := startClusterHub(t, o)
	agents := startClusterAgents(t, c, []string{"dev-1", "dev-2"}, 40)
	checkReadyzThroughOutage(t, s, cc, agents, "NATS", "NATS down",
		func() { c.Kill(0) }, func() { c.Restart(0) })
}

// TestClusterReadyzStreamQuorumLost: with two of three servers down the
// hub's connection survives on the third but the replicated stream has no
// quorum; /readyz answers 503 naming the stream while queries are served,
// and turns ready again once the servers are back; what the agents sent
// meanwhile is applied exactly once.
func TestClusterReadyzStreamQuorumLost(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out NATS failures for seconds; runs without -short")
	}
	c := testnats.Start(t, 3)
	o, cc := clusterOptions(t, t.TempDir(), c, 3)
	o.NATS.URLs = []string{c.Nodes[0].URL()}
	o.PublishTimeout = 2 * time.Second
	s, _ := startClusterHub(t, o)
	agents := startClusterAgents(t, c, []string{"dev-1", "dev-2"}, 40)
	checkReadyzThroughOutage(t, s, cc, agents, "stream", "the quorum lost",
		func() { c.Kill(1); c.Kill(2) }, func() { c.Restart(1); c.Restart(2) })
}

// checkReadyzThroughOutage sends events, causes an outage with down, and
// checks that /readyz answers 503 naming want while queries are still
// served; it sends more events, ends the outage with up, and checks that
// /readyz is 200 again and every event the agents sent is acknowledged
// and applied exactly once. /readyz's answers are logged as they change.
func checkReadyzThroughOutage(t *testing.T, s *Server, cc *countingConsumer, agents []*clusterAgent, want, what string, down, up func()) {
	t.Helper()
	base := time.Now().Add(-2 * time.Hour).Truncate(time.Hour)
	for _, a := range agents {
		a.appendEvents(t, base, 100)
	}
	waitAcked(t, agents, "before the outage")
	waitUntil(t, "/readyz 200 before the outage", func() bool { code, _ := getJSON(t, s.Handler(), "/readyz", nil); return code == 200 })
	down()
	var body []byte
	waitUntil(t, "/readyz 503 naming "+want+" with "+what, func() bool {
		code, b := getJSON(t, s.Handler(), "/readyz", nil)
		if string(b) != string(body) {
			t.Logf("/readyz: %d %s", code, strings.TrimSpace(string(b)))
		}
		body = b
		return code == 503 && strings.Contains(string(body), want)
	})
	if code, b := getJSON(t, s.Handler(), "/v1/devices", nil); code != 200 {
		t.Fatalf("/v1/devices with %s: %d %s", what, code, b)
	}
	for _, a := range agents {
		a.appendEvents(t, base, 100)
	}
	up()
	waitUntil(t, "/readyz 200 after the outage", func() bool { code, _ := getJSON(t, s.Handler(), "/readyz", nil); return code == 200 })
	waitAcked(t, agents, "after the outage")
	waitAllApplied(t, cc, agents, "after the outage")
	checkExactlyOnce(t, cc, agents, "after the outage")
}

// TestClusterStatusAndTimeRequest: in cluster mode a device's status and
// time request published over NATS' MQTT listener reach the hub through
// core NATS: /v1/devices/{id} shows the device online with the version it
// sent, and the time response comes back to the device's MQTT
// subscription (the device id has a dot, which NATS writes as "//").
func TestClusterStatusAndTimeRequest(t *testing.T) {
	c := testnats.Start(t, 1)
	o, _ := clusterOptions(t, t.TempDir(), c, 1)
	s, _ := startClusterHub(t, o)
	const dev = "site.9"
	resp := make(chan []byte, 16)
	mo := paho.NewClientOptions().AddBroker(c.Nodes[0].MQTTURL()).SetClientID("edgeflow-site-9").SetProtocolVersion(4).
		SetConnectTimeout(10 * time.Second)
	cl := paho.NewClient(mo)
	if tok := cl.Connect(); !tok.WaitTimeout(clusterWithin) || tok.Error() != nil {
		t.Fatalf("mqtt connect: %v", tok.Error())
	}
	defer cl.Disconnect(100)
	if tok := cl.Subscribe(wire.TimeRespTopic(dev), 1, func(_ paho.Client, m paho.Message) { resp <- m.Payload() }); !tok.WaitTimeout(clusterWithin) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	st, err := wire.EncodeStatus(&wirepb.Status{DeviceId: dev, Online: true, Version: "v-cluster-test", TimeNs: time.Now().UnixNano()})
	if err != nil {
		t.Fatal(err)
	}
	if tok := cl.Publish(wire.StatusTopic(dev), 1, false, st); !tok.WaitTimeout(clusterWithin) || tok.Error() != nil {
		t.Fatalf("publish status: %v", tok.Error())
	}
	waitUntil(t, dev+" online in /v1/devices/{id} with its version", func() bool {
		var d hubapi.DeviceInfo
		code, _ := getJSON(t, s.Handler(), "/v1/devices/"+dev, &d)
		return code == 200 && d.Online && d.Version == "v-cluster-test"
	})
	req, err := wire.EncodeTimeRequest(&wirepb.TimeRequest{RequestId: 42, T1Ns: time.Now().UnixNano()})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(clusterWithin)
	for {
		if tok := cl.Publish(wire.TimeReqTopic(dev), 1, false, req); !tok.WaitTimeout(clusterWithin) || tok.Error() != nil {
			t.Fatalf("publish time request: %v", tok.Error())
		}
		select {
		case p := <-resp:
			r, err := wire.DecodeTimeResponse(p, wire.Limits{})
			if err != nil {
				t.Fatalf("time response: %v", err)
			}
			if r.GetRequestId() != 42 || r.GetT2Ns() == 0 {
				t.Fatalf("time response %v, want request 42 with the hub's times", r)
			}
			return
		case <-time.After(2 * time.Second):
			if time.Now().After(deadline) {
				t.Fatalf("no time response after %v", clusterWithin)
			}
		}
	}
}

// TestClusterStartsBeforeNATS: a hub started while its NATS server is
// down waits, not ready and saying why, and starts reading once the
// server is up.
func TestClusterStartsBeforeNATS(t *testing.T) {
	c := testnats.Start(t, 1)
	c.Kill(0)
	o, cc := clusterOptions(t, t.TempDir(), c, 1)
	o.PublishTimeout = time.Second
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan error, 1)
	go func() { started <- s.Start(context.Background()) }()
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	waitUntil(t, "/readyz 503 naming NATS while the hub waits for it", func() bool {
		code, body := getJSON(t, s.Handler(), "/readyz", nil)
		return code == 503 && strings.Contains(string(body), "NATS")
	})
	c.Restart(0)
	select {
	case err := <-started:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(clusterWithin):
		t.Fatalf("Start did not return within %v of the server's restart", clusterWithin)
	}
	agents := startClusterAgents(t, c, []string{"dev-1"}, 40)
	agents[0].appendEvents(t, time.Now().Add(-2*time.Hour).Truncate(time.Hour), 100)
	waitAcked(t, agents, "after the late start")
	waitAllApplied(t, cc, agents, "after the late start")
	checkExactlyOnce(t, cc, agents, "after the late start")
}

// TestClusterStreamFull: a stream at its byte limit refuses a device's
// batches; the hub, which reads only what the stream holds, never acks
// them, and the fullness gauge shows the stream full. A hub restarted
// with a larger limit raises the stream's, the agent's resends are stored,
// and every event is applied once.
func TestClusterStreamFull(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out NATS failures for seconds; runs without -short")
	}
	c := testnats.Start(t, 1)
	dir := t.TempDir()
	o, _ := clusterOptions(t, dir, c, 1)
	o.NATS.Log.MaxBytes = 1 << 20
	s, stop := startClusterHub(t, o)
	l := s.cl.Log()
	// Fill it to the brim: smaller and smaller messages until even one
	// byte is refused, so no device batch fits.
	for _, size := range []int{60 << 10, 4 << 10, 256, 16, 1} {
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := l.Publish(ctx, "filler", make([]byte, size))
			cancel()
			if err != nil {
				if size == 1 {
					t.Logf("the stream refuses even one byte: %v", err)
				}
				break
			}
		}
	}
	f, err := l.Fullness(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	agents := startClusterAgents(t, c, []string{"dev-1"}, 40)
	agents[0].appendEvents(t, time.Now().Add(-2*time.Hour).Truncate(time.Hour), 100)
	waitUntil(t, "edgeflow_hub_stream_fullness_ratio above 0.8", func() bool {
		var m dto.Metric
		return s.clm.Fullness.Write(&m) == nil && m.GetGauge().GetValue() > 0.8
	})
	// The agent has sent (and NATS PUBACKed) its batches meanwhile and
	// resends them every AckTimeout; none is in the stream, none acked.
	time.Sleep(3 * time.Second)
	f2, err := l.Fullness(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if f2.LastSeq != f.LastSeq || agents[0].st.Stats().Acked != 0 {
		t.Fatalf("full stream: last sequence %d -> %d, %d events acked; want no change and none", f.LastSeq, f2.LastSeq, agents[0].st.Stats().Acked)
	}
	stop(false)
	o2, cc2 := clusterOptions(t, dir, c, 1)
	o2.NATS.Log.MaxBytes = 16 << 20
	startClusterHub(t, o2)
	waitAcked(t, agents, "after raising the limit")
	waitAllApplied(t, cc2, agents, "after raising the limit")
	checkExactlyOnce(t, cc2, agents, "after raising the limit")
}
