package hub

import (
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"edgeflow/internal/testbroker"
	"edgeflow/wire"
)

// TestMosquittoACLHubOnlyTopics checks that deploy/mosquitto/edgeflow.acl
// gives devices no write on ack and time response topics, their own
// included: a device's retained forged acks never reach a subscriber,
// while the hub's user may write there.
func TestMosquittoACLHubOnlyTopics(t *testing.T) {
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
	url := testbroker.StartMosquitto(t, testbroker.MosquittoOptions{Secure: true,
		Conf: "password_file " + pwFile + "\nacl_file " + acl}).URL()

	a, err := mqttClient(t, url, "edgeflow-dev-a", "dev-a", "password-a", nil, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, topic := range []string{wire.AckTopic("dev-a"), wire.AckTopic("dev-b"), wire.TimeRespTopic("dev-a"), wire.TimeRespTopic("dev-b")} {
		// Mosquitto acknowledges a publish its ACL refuses, and drops it.
		if tok := a.Publish(topic, 1, true, []byte("forged")); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
			t.Fatalf("publish %s: %v", topic, tok.Error())
		}
	}
	hubc, err := mqttClient(t, url, "edgeflow-hubd", "edgeflow-hubd", "hub-password", nil, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, dev := range []string{"dev-a", "dev-b"} {
		// The hub's retained time response is the last thing each device's
		// fresh subscription receives: Mosquitto sends retained messages
		// per SUBSCRIBE, in order.
		if tok := hubc.Publish(wire.TimeRespTopic(dev), 1, true, []byte("from the hub")); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
			t.Fatalf("hub publish: %v", tok.Error())
		}
	}
	for _, dev := range []string{"dev-a", "dev-b"} {
		c, err := mqttClient(t, url, "fresh-"+dev, dev, "password-"+dev[len(dev)-1:], nil, "")
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan string, 4)
		for _, f := range []string{wire.AckTopic(dev), wire.TimeRespTopic(dev)} {
			if tok := c.Subscribe(f, 1, func(_ paho.Client, m paho.Message) { got <- m.Topic() + " " + string(m.Payload()) }); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
				t.Fatalf("subscribe %s: %v", f, tok.Error())
			}
		}
		select {
		case m := <-got:
			if m != wire.TimeRespTopic(dev)+" from the hub" {
				t.Fatalf("%s received %q", dev, m)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the hub's retained time response never came", dev)
		}
	}
}
