package hub

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"edgeflow/internal/testbroker"
	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// TestMosquittoACL runs the hub on a real Mosquitto with a password file
// made by mosquitto_passwd and the ACL of deploy/mosquitto/edgeflow.acl
// (the one docs/SECURITY.md documents): devices get in with their own
// password only, and a device can neither publish for another nor read
// another's acks.
func TestMosquittoACL(t *testing.T) {
	passwdBin, err := exec.LookPath("mosquitto_passwd")
	if err != nil {
		t.Skip("mosquitto_passwd is not installed (Debian: apt-get install mosquitto): the Mosquitto ACL test needs it")
	}
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "passwd")
	for i, u := range [][2]string{{"edgeflow-hubd", "hub-password"}, {"dev-a", "password-a"}, {"dev-b", "password-b"}} {
		args := []string{"-b", pwFile, u[0], u[1]}
		if i == 0 {
			args = append([]string{"-c"}, args...)
		}
		if out, err := exec.Command(passwdBin, args...).CombinedOutput(); err != nil {
			t.Fatalf("mosquitto_passwd: %v: %s", err, out)
		}
	}
	acl, err := filepath.Abs("../deploy/mosquitto/edgeflow.acl")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(acl); err != nil {
		t.Fatal(err)
	}
	m := testbroker.StartMosquitto(t, testbroker.MosquittoOptions{MaxInflight: 64, Secure: true,
		Conf: "password_file " + pwFile + "\nacl_file " + acl})
	url := m.URL()

	if _, err := mqttClient(t, url, "anon", "", "", nil, ""); err == nil {
		t.Fatal("anonymous client accepted")
	}
	if _, err := mqttClient(t, url, "edgeflow-dev-a", "dev-a", "password-b", nil, ""); err == nil {
		t.Fatal("wrong password accepted")
	}
	o := testOptions(t, t.TempDir())
	o.MQTTURL, o.ClientID, o.Username, o.Password = url, "edgeflow-hubd", "edgeflow-hubd", "hub-password"
	s := startHub(t, o)
	waitReady(t, s)

	a := securedDevice(t, url, "dev-a", "password-a")
	b := securedDevice(t, url, "dev-b", "password-b")
	leak := make(chan string, 1)
	a.c.Subscribe(wire.AckTopic("dev-b"), 1, func(_ paho.Client, msg paho.Message) {
		select {
		case leak <- msg.Topic():
		default:
		}
	}).WaitTimeout(5 * time.Second)

	if ack := a.send(makeBatch("dev-a", a.stream, 1, 10)); ack.Status != wirepb.AckStatus_ACK_STATUS_OK {
		t.Fatalf("dev-a: %v", ack)
	}
	// dev-a forges a batch for dev-b: Mosquitto drops it silently.
	forged := makeBatch("dev-b", wire.NewStreamID(), 1, 10)
	a.publish(wire.BatchTopic("dev-b"), encodeBatch(t, forged))
	// dev-b's own batch goes through, and its ack reaches dev-b only.
	if ack := b.send(makeBatch("dev-b", b.stream, 1, 7)); ack.Status != wirepb.AckStatus_ACK_STATUS_OK {
		t.Fatalf("dev-b: %v", ack)
	}
	// The registry is updated by the applier after the ack: wait for dev-b's
	// 7 events, then give a forged batch time to show up beside them.
	waitFor(t, func() bool { i, _ := s.Device("dev-b"); return len(i.Streams) > 0 && i.Streams[0].Events == 7 })
	time.Sleep(300 * time.Millisecond)
	info, _ := s.Device("dev-b")
	if len(info.Streams) != 1 || info.Streams[0].Events != 7 || info.Streams[0].StreamID != b.stream.String() {
		t.Fatalf("dev-b streams on the hub: %+v (a forged stream got in?)", info.Streams)
	}
	select {
	case topic := <-leak:
		t.Fatalf("dev-a read %s", topic)
	default:
	}
}
