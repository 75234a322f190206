package hub

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"edgeflow/hub/hubapi"
	"edgeflow/hub/ranges"
	"edgeflow/internal/testbroker"
	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// deliveryScenario is what every transport must do: OK for a new batch,
// DUPLICATE for a redelivery, REJECTED with a reason for bad batches while
// the next good batch still flows, OK for a partial overlap (only the new
// part applied), and the registry shows it all.
func deliveryScenario(t *testing.T, s *Server, brokerURL string, cc *countingConsumer) {
	d := newDevice(t, brokerURL, "dev-a")
	ack := d.send(makeBatch("dev-a", d.stream, 1, 100))
	if ack.Status != wirepb.AckStatus_ACK_STATUS_OK || ack.FirstSeq != 1 || ack.LastSeq != 100 || string(ack.StreamId) != string(d.stream[:]) {
		t.Fatalf("first batch: %v", ack)
	}
	if ack := d.send(makeBatch("dev-a", d.stream, 1, 100)); ack.Status != wirepb.AckStatus_ACK_STATUS_DUPLICATE {
		t.Fatalf("redelivery: %v", ack)
	}
	bad := makeBatch("dev-a", d.stream, 101, 10)
	bad.Gaps = []*wirepb.Gap{{FirstSeq: 101, LastSeq: 101}} // over its own events: rejected whole
	if ack := d.send(bad); ack.Status != wirepb.AckStatus_ACK_STATUS_REJECTED || !strings.HasPrefix(ack.Reason, "bad_gap") {
		t.Fatalf("bad batch: %v", ack)
	}
	mismatch := makeBatch("dev-b", d.stream, 101, 10)
	d.forget(101)
	d.publish("", encodeBatch(t, mismatch))
	if ack := d.waitAck(101, 10*time.Second); ack.Status != wirepb.AckStatus_ACK_STATUS_REJECTED || !strings.HasPrefix(ack.Reason, "device_mismatch") {
		t.Fatalf("mismatched device: %v", ack)
	}
	d.forget(101)
	d.publish("", []byte("garbage"))
	if ack := d.send(makeBatch("dev-a", d.stream, 101, 50)); ack.Status != wirepb.AckStatus_ACK_STATUS_OK {
		t.Fatalf("good batch after bad ones: %v", ack)
	}
	gapped := makeBatch("dev-a", d.stream, 141, 30) // 141..170: 141..150 already applied
	gapped.Gaps = []*wirepb.Gap{{FirstSeq: 200, LastSeq: 209, Reason: "max_bytes"}}
	if ack := d.send(gapped); ack.Status != wirepb.AckStatus_ACK_STATUS_OK || ack.LastSeq != 170 {
		t.Fatalf("partial overlap: %v", ack)
	}
	// Acks go out once the batch is durable; applying may lag a moment.
	waitFor(t, func() bool { i, _ := s.Device("dev-a"); return len(i.Streams) == 1 && i.Streams[0].Events == 170 })
	checkDeviceAPI(t, s, "dev-a", d.stream)
	// Every ack came at the QoS the hub publishes them at (the device
	// subscribed at 1, so that is the hub's choice).
	want := byte(0)
	if s.opts.AcksAtLeastOnce {
		want = 1
	}
	d.mu.Lock()
	if got := d.qos[want]; got < 6 || len(d.qos) != 1 {
		t.Errorf("acks by QoS %v, want every one (at least 6) at QoS %d", d.qos, want)
	}
	d.mu.Unlock()
	if cc != nil {
		// The registry is updated before the consumers are called.
		waitFor(t, func() bool {
			cc.mu.Lock()
			defer cc.mu.Unlock()
			c := cc.Streams["dev-a/"+d.stream.String()]
			return c != nil && c.Events >= 170
		})
		cc.mu.Lock()
		c := *cc.Streams["dev-a/"+d.stream.String()]
		cc.mu.Unlock()
		if c.Events != 170 || c.Twice != 0 {
			t.Fatalf("consumer saw %+v, want 170 events once each", c)
		}
	}
}

func nan() float64 { var z float64; return z / z }

// checkDeviceAPI reads GET /v1/devices/{id} and checks ranges and gaps.
func checkDeviceAPI(t *testing.T, s *Server, id string, stream wire.StreamID) {
	t.Helper()
	resp, err := http.Get("http://" + s.HTTPAddr() + "/v1/devices/" + id)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var info hubapi.DeviceInfo
	if err := json.NewDecoder(resp.Body).Decode(&info); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET device: %v %d", err, resp.StatusCode)
	}
	if len(info.Streams) != 1 || info.Streams[0].StreamID != stream.String() {
		t.Fatalf("streams: %+v", info.Streams)
	}
	st := info.Streams[0]
	if !slices.Equal(st.Applied.Ranges(), []ranges.SeqRange{{First: 1, Last: 170}}) || st.Events != 170 {
		t.Fatalf("applied %v (%d events), want [1,170]", st.Applied.Ranges(), st.Events)
	}
	if !slices.Equal(st.Gaps.Ranges(), []ranges.SeqRange{{First: 200, Last: 209}}) || st.GapReasons["max_bytes"] != 10 {
		t.Fatalf("gaps %v %v", st.Gaps.Ranges(), st.GapReasons)
	}
	if info.Clock.Method != "NTP" || info.Clock.Source != "agent" || info.Backlog.Events != 10 {
		t.Fatalf("clock/backlog: %+v %+v", info.Clock, info.Backlog)
	}
}

func TestIngestEmbeddedBroker(t *testing.T) {
	s, cc := startCountingHub(t, t.TempDir())
	waitReady(t, s)
	deliveryScenario(t, s, "tcp://"+s.BrokerAddr(), cc)
	checkStatus(t, s)
}

// checkStatus publishes a retained status and a last will and checks the
// registry follows them.
func checkStatus(t *testing.T, s *Server) {
	d := newDevice(t, "tcp://"+s.BrokerAddr(), "dev-s")
	st, _ := wire.EncodeStatus(&wirepb.Status{DeviceId: "dev-s", Online: true, Version: "1.2.3"})
	if tok := d.c.Publish(wire.StatusTopic("dev-s"), 1, true, st); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	waitFor(t, func() bool { i, ok := s.Device("dev-s"); return ok && i.Status == "online" && i.Version == "1.2.3" })
	st, _ = wire.EncodeStatus(&wirepb.Status{DeviceId: "dev-s", Online: false})
	d.c.Publish(wire.StatusTopic("dev-s"), 1, true, st).WaitTimeout(5 * time.Second)
	waitFor(t, func() bool { i, _ := s.Device("dev-s"); return i.Status == "offline" })
}

func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func waitReady(t testing.TB, s *Server) {
	t.Helper()
	waitFor(t, func() bool {
		resp, err := http.Get("http://" + s.HTTPAddr() + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
}

// TestAcksAtLeastOnce runs the delivery scenario with acks published at
// QoS 1, through the embedded broker and a real Mosquitto.
func TestAcksAtLeastOnce(t *testing.T) {
	t.Run("embedded", func(t *testing.T) {
		o := testOptions(t, t.TempDir())
		o.AcksAtLeastOnce = true
		s := startHub(t, o)
		waitReady(t, s)
		deliveryScenario(t, s, "tcp://"+s.BrokerAddr(), nil)
	})
	t.Run("mosquitto", func(t *testing.T) {
		url := startMosquitto(t)
		o := testOptions(t, t.TempDir())
		o.MQTTURL, o.ClientID, o.AcksAtLeastOnce = url, "hub-test-qos1", true
		s := startHub(t, o)
		waitReady(t, s)
		deliveryScenario(t, s, url, nil)
	})
}

// startMosquitto runs a real Mosquitto on a free loopback port for the
// test and returns its URL.
func startMosquitto(t testing.TB) string {
	return testbroker.StartMosquitto(t, testbroker.MosquittoOptions{MaxInflight: 64}).URL()
}

func TestIngestMosquitto(t *testing.T) {
	url := startMosquitto(t)
	cc := newCountingConsumer()
	o := testOptions(t, t.TempDir())
	o.MQTTURL, o.ClientID, o.Consumers = url, "hub-test", []Consumer{cc}
	s := startHub(t, o)
	waitReady(t, s)
	deliveryScenario(t, s, url, cc)
}

// TestTimeServiceWired asks the hub for the time through the embedded
// broker and gets an answer with t2 <= t3.
func TestTimeServiceWired(t *testing.T) {
	s := startHub(t, testOptions(t, t.TempDir()))
	d := newDevice(t, "tcp://"+s.BrokerAddr(), "dev-t")
	got := make(chan *wirepb.TimeResponse, 1)
	tok := d.c.Subscribe(wire.TimeRespTopic("dev-t"), 1, func(_ paho.Client, m paho.Message) {
		if r, err := wire.DecodeTimeResponse(m.Payload(), wire.Limits{}); err == nil {
			got <- r
		}
	})
	if !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	req, _ := wire.EncodeTimeRequest(&wirepb.TimeRequest{RequestId: 7, T1Ns: baseTimeNs})
	d.publish(wire.TimeReqTopic("dev-t"), req)
	select {
	case r := <-got:
		if r.RequestId != 7 || r.T1Ns != baseTimeNs || r.T2Ns == 0 || r.T3Ns < r.T2Ns {
			t.Fatalf("response %v", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no time response")
	}
}
