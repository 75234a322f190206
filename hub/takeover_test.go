package hub

import (
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// statusFrame encodes a status of dev with a connection id.
func statusFrame(t testing.TB, dev string, online bool, conn uint64) []byte {
	t.Helper()
	b, err := wire.EncodeStatus(&wirepb.Status{DeviceId: dev, Online: online, Connection: conn})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestStaleWillIgnored: the will of an older connection that arrives
// after the newer connection's online status (a broker taking a session
// over publishes it late) leaves the device online; the newer
// connection's own offline status is applied, and statuses without a
// connection id (older agents) are applied in arrival order as before.
func TestStaleWillIgnored(t *testing.T) {
	s := startHub(t, testOptions(t, t.TempDir()))
	d := newDevice(t, "tcp://"+s.BrokerAddr(), "dev-w")
	status := func() string { i, _ := s.Device("dev-w"); return i.Status }
	steps := []struct {
		online bool
		conn   uint64
		want   string
	}{
		{true, 11, "online"},
		{true, 22, "online"},  // takeover: the new connection is online
		{false, 11, "online"}, // then the old connection's will: stale
		{false, 22, "offline"},
		{true, 0, "online"}, // an agent without connection ids
		{false, 0, "offline"},
	}
	for i, st := range steps {
		d.publish(wire.StatusTopic("dev-w"), statusFrame(t, "dev-w", st.online, st.conn))
		// Each status is followed by a batch and its ack, so the status has
		// been logged and applied before the check.
		if ack := d.send(makeBatch("dev-w", d.stream, uint64(1+10*i), 10)); ack.Status != wirepb.AckStatus_ACK_STATUS_OK {
			t.Fatalf("step %d: batch %v", i, ack)
		}
		waitFor(t, func() bool {
			info, _ := s.Device("dev-w")
			return len(info.Streams) == 1 && info.Streams[0].Events == uint64(10*(i+1))
		})
		if got := status(); got != st.want {
			t.Fatalf("step %d (online %v, connection %d): status %s, want %s", i, st.online, st.conn, got, st.want)
		}
	}
}

// TestSessionTakeoverStaysOnline takes a session over on the embedded
// broker 19 times, as an agent reconnecting over a half-open connection
// does: the broker closes the old connection and publishes its will, racing
// the new connection's online status. The device must end up online. Here
// mochi published each will before the new status in every run, so this
// checks the path through the real broker; TestStaleWillIgnored makes the
// late-will order that the connection ids are for.
func TestSessionTakeoverStaysOnline(t *testing.T) {
	s := startHub(t, testOptions(t, t.TempDir()))
	url := "tcp://" + s.BrokerAddr()
	dial := func(conn uint64) paho.Client {
		o := paho.NewClientOptions().AddBroker(url).SetClientID("agent-dev-k").SetCleanSession(false).
			SetAutoReconnect(false).SetConnectTimeout(5*time.Second).
			SetBinaryWill(wire.StatusTopic("dev-k"), statusFrame(t, "dev-k", false, conn), 1, true)
		c := paho.NewClient(o)
		if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("connect %d: %v", conn, tok.Error())
		}
		if tok := c.Publish(wire.StatusTopic("dev-k"), 1, true, statusFrame(t, "dev-k", true, conn)); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("online %d: %v", conn, tok.Error())
		}
		return c
	}
	online := func() bool { i, _ := s.Device("dev-k"); return i.Status == "online" }
	dial(1)
	waitFor(t, online)
	for conn := uint64(2); conn <= 20; conn++ {
		c := dial(conn) // takes over conn-1's session: its will fires
		t.Cleanup(func() { c.Disconnect(0) })
	}
	// A batch through the same hub behind the last will and status: once
	// it is applied, so are they (one log, in arrival order).
	d := newDevice(t, url, "dev-k-barrier")
	if ack := d.send(makeBatch("dev-k-barrier", d.stream, 1, 10)); ack.Status != wirepb.AckStatus_ACK_STATUS_OK {
		t.Fatalf("barrier batch: %v", ack)
	}
	waitFor(t, func() bool { info, _ := s.Device("dev-k-barrier"); return len(info.Streams) == 1 })
	if i, _ := s.Device("dev-k"); i.Status != "online" {
		t.Fatalf("after 19 takeovers the device is %s", i.Status)
	}
}
