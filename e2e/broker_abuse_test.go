package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"edgeflow/hub/broker"
	"edgeflow/internal/testbroker"
	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// startHubWith starts hubd with its embedded broker and extra flags.
func startHubWith(t testing.TB, extra ...string) *hubProc {
	h := &hubProc{t: t, bin: buildHubd(t), httpAddr: fmt.Sprintf("127.0.0.1:%d", testbroker.FreePort(t))}
	listen := fmt.Sprintf("127.0.0.1:%d", testbroker.FreePort(t))
	h.args = append([]string{"--data-dir", t.TempDir(), "--http-addr", h.httpAddr, "--log-level", "warn",
		"--mqtt-listen", listen}, extra...)
	h.brokerURL = "tcp://" + listen
	var err error
	if h.log, err = os.Create(filepath.Join(t.TempDir(), "hubd.log")); err != nil {
		t.Fatal(err)
	}
	h.start()
	t.Cleanup(h.kill)
	return h
}

// metric reads one series (name{labels}, as /metrics prints it) of hubd;
// a missing series fails the test.
func (h *hubProc) metric(series string) float64 {
	h.t.Helper()
	sc := bufio.NewScanner(strings.NewReader(getBody(h.t, "http://"+h.httpAddr+"/metrics")))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				h.t.Fatalf("%s: %v", series, err)
			}
			return f
		}
	}
	h.t.Fatalf("hubd /metrics has no %s", series)
	return 0
}

// brokerClient connects to url from localIP ("" for any); err is the
// CONNECT's outcome.
func brokerClient(t testing.TB, url, clientID, user, pass, localIP string) (paho.Client, error) {
	o := paho.NewClientOptions().AddBroker(url).SetClientID(clientID).SetCleanSession(true).
		SetAutoReconnect(false).SetConnectTimeout(5 * time.Second).SetProtocolVersion(4)
	if user != "" {
		o.SetUsername(user).SetPassword(pass)
	}
	if localIP != "" {
		o.SetDialer(&net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(localIP)}})
	}
	c := paho.NewClient(o)
	tok := c.Connect()
	if !tok.WaitTimeout(10 * time.Second) {
		return nil, fmt.Errorf("connect %s: no CONNACK", clientID)
	}
	if err := tok.Error(); err != nil {
		return nil, err
	}
	t.Cleanup(func() { c.Disconnect(50) })
	return c, nil
}

// publish publishes and waits for the broker to take the message (QoS 1:
// its PUBACK; QoS 0: the write).
func publish(t testing.TB, c paho.Client, topic string, qos byte, retain bool, payload []byte) {
	t.Helper()
	tok := c.Publish(topic, qos, retain, payload)
	if !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
		t.Fatalf("publish %s: %v", topic, tok.Error())
	}
}

// retainedMsg is one retained message a fresh subscriber received.
type retainedMsg struct {
	topic string
	size  int
}

// freshSubscriber subscribes to each of filters in turn, one SUBSCRIBE
// each, then to last, whose retained message must come: a broker handles
// one client's packets in order and queues its retained messages in
// order, so every retained message of filters arrives before last's. It
// returns the retained messages of filters and last's payload.
func freshSubscriber(t testing.TB, url string, filters []string, last string) ([]retainedMsg, []byte) {
	t.Helper()
	c, err := brokerClient(t, url, "fresh-subscriber", "", "", "")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []retainedMsg
	lastMsg := make(chan []byte, 1)
	for _, f := range filters {
		tok := c.Subscribe(f, 1, func(_ paho.Client, m paho.Message) {
			if m.Retained() {
				mu.Lock()
				got = append(got, retainedMsg{m.Topic(), len(m.Payload())})
				mu.Unlock()
			}
		})
		if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("subscribe %s: %v", f, tok.Error())
		}
	}
	tok := c.Subscribe(last, 1, func(_ paho.Client, m paho.Message) {
		select {
		case lastMsg <- m.Payload():
		default:
		}
	})
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe %s: %v", last, tok.Error())
	}
	var p []byte
	select {
	case p = <-lastMsg:
	case <-time.After(30 * time.Second):
		t.Fatalf("the retained message of %s never came", last)
	}
	mu.Lock()
	defer mu.Unlock()
	return got, p
}

// statusPayload is a device's status message, as its agent retains it.
func statusPayload(t testing.TB, device string) []byte {
	b, err := wire.EncodeStatus(&wirepb.Status{DeviceId: device, Online: true, TimeNs: time.Now().UnixNano(), Version: "e2e"})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestBrokerRetainedAnonymous: on hubd's embedded broker in its open
// (anonymous) mode, a client retains 5 MB on a topic of its choosing and
// on a device's status topic, and a forged ack on another device's ack
// topic. A fresh subscriber to those topics receives none of them
// retained, the refusals are counted, and a device's small status is
// still retained.
func TestBrokerRetainedAnonymous(t *testing.T) {
	h := startHubWith(t)
	c, err := brokerClient(t, h.brokerURL, "abuser", "", "", "")
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("x"), 5<<20)
	publish(t, c, "any/topic", 1, true, big)
	publish(t, c, wire.StatusTopic("dev-x"), 1, true, big)
	forged, err := wire.EncodeAck(&wirepb.Ack{StreamId: make([]byte, 16), FirstSeq: 1, LastSeq: 1_000_000, Status: wirepb.AckStatus_ACK_STATUS_OK})
	if err != nil {
		t.Fatal(err)
	}
	// QoS 0: a refused QoS 1 publish closes an MQTT 3.1.1 connection.
	publish(t, c, wire.AckTopic("dev-b"), 0, true, forged)
	publish(t, c, "sync/after-forged-ack", 1, false, []byte("-")) // handled after the ack, on one connection
	publish(t, c, wire.StatusTopic("dev-ok"), 1, true, statusPayload(t, "dev-ok"))

	got, p := freshSubscriber(t, h.brokerURL, []string{"any/topic", wire.StatusTopic("dev-x"), wire.AckTopic("dev-b")},
		wire.StatusTopic("dev-ok"))
	if len(got) != 0 {
		t.Errorf("a fresh subscriber received retained: %v", got)
	}
	if len(p) == 0 || len(p) > 4<<10 {
		t.Errorf("dev-ok's retained status: %d bytes", len(p))
	}
	if n := h.metric(`edgeflow_hub_broker_retained_refused_total{why="not_status_topic"}`); n != 1 {
		t.Errorf("retained refused as not_status_topic: %v, want 1", n)
	}
	if n := h.metric(`edgeflow_hub_broker_retained_refused_total{why="too_large"}`); n != 1 {
		t.Errorf("retained refused as too_large: %v, want 1", n)
	}
	if n := h.metric(`edgeflow_hub_broker_acl_denied_total{action="publish"}`); n != 1 {
		t.Errorf("publishes denied: %v, want 1 (the forged ack)", n)
	}
}

// TestBrokerRetainedAuthenticated: a device with a password retains its
// small status, then 4 MB on its own status topic: the 4 MB are refused
// (counted) and the small status stays the retained one.
func TestBrokerRetainedAuthenticated(t *testing.T) {
	h := startHubWith(t, "--mqtt-auth-file", credentialsFile(t, "dev-a", "password-a"))
	c, err := brokerClient(t, h.brokerURL, "edgeflow-dev-a", "dev-a", "password-a", "")
	if err != nil {
		t.Fatal(err)
	}
	small := statusPayload(t, "dev-a")
	publish(t, c, wire.StatusTopic("dev-a"), 1, true, small)
	publish(t, c, wire.StatusTopic("dev-a"), 1, true, bytes.Repeat([]byte("x"), 4<<20))

	_, p := freshSubscriber(t, h.brokerURL, nil, wire.StatusTopic("dev-a"))
	if !bytes.Equal(p, small) {
		t.Errorf("dev-a's retained status is %d bytes, want its %d-byte status", len(p), len(small))
	}
	if n := h.metric(`edgeflow_hub_broker_retained_refused_total{why="too_large"}`); n != 1 {
		t.Errorf("retained refused as too_large: %v, want 1", n)
	}
}

// credentialsFile writes a credentials file (bcrypt's minimum cost: the
// test counts comparisons, it does not time them).
func credentialsFile(t testing.TB, pairs ...string) string {
	var b strings.Builder
	for i := 0; i < len(pairs); i += 2 {
		line, err := broker.HashPassword(pairs[i], []byte(pairs[i+1]), 4)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString(line + "\n")
	}
	path := filepath.Join(t.TempDir(), "passwd")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestBrokerPasswordFlood: failed-password CONNECTs from one client id,
// then from one source under changing client ids. After a few failures
// the rest are refused without a bcrypt comparison (the comparisons hubd
// counts stay bounded while all the attempts are made), and a device with
// the right password still connects under another client id, and from
// another source. No timing is asserted: only counters.
func TestBrokerPasswordFlood(t *testing.T) {
	const sourceFailures = 20 // hubd's defaults: 3 per client id and source, 20 per source
	h := startHubWith(t, "--mqtt-auth-file", credentialsFile(t, "dev-a", "password-a", "dev-b", "password-b"),
		"--mqtt-allow-anonymous=false")
	bcrypts := func() float64 {
		return h.metric(`edgeflow_hub_broker_bcrypt_checks_total{result="failed"}`) + h.metric(`edgeflow_hub_broker_bcrypt_checks_total{result="ok"}`)
	}
	const attempts = 40
	for i := 0; i < attempts; i++ {
		if _, err := brokerClient(t, h.brokerURL, "flood-1", "dev-a", "wrong", "127.0.0.1"); err == nil {
			t.Fatal("a wrong password was accepted")
		}
	}
	// Each bad_credentials refusal cost a bcrypt comparison.
	if n := h.metric(`edgeflow_hub_broker_refused_connections_total{why="bad_credentials"}`); n > 9 {
		t.Fatalf("%v of %d attempts from one client id were checked with bcrypt and refused as bad_credentials", n, attempts)
	}
	checked, throttled := bcrypts(), h.metric(`edgeflow_hub_broker_refused_connections_total{why="throttled"}`)
	t.Logf("one client id: %d attempts, %v bcrypt comparisons, %v refused by the throttle", attempts, checked, throttled)
	// 3 free failures, then one per backoff of 1s, 2s, 4s, ...: more than
	// 9 would take the loop over a minute.
	if checked < 3 || checked > 9 || checked+throttled != attempts {
		t.Fatalf("one client id: %v comparisons and %v throttled of %d attempts, want 3..9 comparisons and the rest throttled",
			checked, throttled, attempts)
	}
	// The same source, another client id, the right password.
	if _, err := brokerClient(t, h.brokerURL, "edgeflow-dev-a", "dev-a", "password-a", "127.0.0.1"); err != nil {
		t.Fatalf("dev-a under its own client id: %v", err)
	}
	// The throttled client id from another source.
	if _, err := brokerClient(t, h.brokerURL, "flood-1", "dev-a", "password-a", "127.0.0.2"); err != nil {
		t.Fatalf("client id flood-1 from another source: %v", err)
	}

	// One source, a new client id each time.
	before := bcrypts()
	for i := 0; i < attempts; i++ {
		if _, err := brokerClient(t, h.brokerURL, fmt.Sprintf("rotate-%d", i), "dev-b", "wrong", "127.0.0.1"); err == nil {
			t.Fatal("a wrong password was accepted")
		}
	}
	checked = bcrypts() - before
	t.Logf("one source: %d attempts, %v bcrypt comparisons", attempts, checked)
	if checked > sourceFailures {
		t.Fatalf("one source under changing client ids: %v comparisons for %d attempts, want at most %d", checked, attempts, sourceFailures)
	}
	// The source is refused now, even with the right password; another
	// source is not.
	if _, err := brokerClient(t, h.brokerURL, "edgeflow-dev-b", "dev-b", "password-b", "127.0.0.1"); err == nil {
		t.Fatal("dev-b connected from the throttled source")
	}
	if _, err := brokerClient(t, h.brokerURL, "edgeflow-dev-b", "dev-b", "password-b", "127.0.0.2"); err != nil {
		t.Fatalf("dev-b from another source: %v", err)
	}
}
