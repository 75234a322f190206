package hub

import (
	"errors"
	"os"
	"strings"
	"testing"

	"edgeflow/hub/broker"
	paho "github.com/eclipse/paho.mqtt.golang"
)

// TestReloadCredentials starts the embedded broker with dev-a and dev-b,
// connects both, then reloads a file that drops dev-b, changes dev-a's
// password and adds dev-c: dev-b and dev-a are disconnected, dev-b is
// refused on reconnect, dev-a gets in only with its new password, dev-c
// gets in. A file that does not parse leaves the credentials in force.
func TestReloadCredentials(t *testing.T) {
	s, url := securedHub(t, nil)
	lost := map[string]chan struct{}{}
	connect := func(dev, pass string) (paho.Client, error) {
		lost[dev] = make(chan struct{})
		ch := lost[dev]
		o := paho.NewClientOptions().AddBroker(url).SetClientID("edgeflow-" + dev).SetUsername(dev).SetPassword(pass).
			SetAutoReconnect(false).SetProtocolVersion(4).
			SetConnectionLostHandler(func(paho.Client, error) { close(ch) })
		c := paho.NewClient(o)
		if tok := c.Connect(); !tok.WaitTimeout(10e9) || tok.Error() != nil {
			return nil, errors.Join(errors.New("connect "+dev), tok.Error())
		}
		t.Cleanup(func() { c.Disconnect(50) })
		return c, nil
	}
	a, err := connect("dev-a", "password-a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := connect("dev-b", "password-b")
	if err != nil {
		t.Fatal(err)
	}
	next := writeCredentials(t, "dev-a", "new-a", "dev-c", "password-c")
	copyFile(t, next, s.opts.MQTTAuthFile)
	devices, dropped, err := s.ReloadCredentials()
	if err != nil || devices != 2 || dropped != 2 {
		t.Fatalf("reload: devices %d disconnected %d err %v, want 2, 2, nil", devices, dropped, err)
	}
	<-lost["dev-a"] // waits for the disconnect (the test's timeout bounds it)
	<-lost["dev-b"]
	if a.IsConnectionOpen() || b.IsConnectionOpen() {
		t.Fatal("revoked clients still connected")
	}
	if _, err := connect("dev-b", "password-b"); err == nil {
		t.Fatal("removed device reconnected")
	}
	if _, err := connect("dev-a", "password-a"); err == nil {
		t.Fatal("old password still accepted")
	}
	if _, err := connect("dev-a", "new-a"); err != nil {
		t.Fatalf("new password refused: %v", err)
	}
	if _, err := connect("dev-c", "password-c"); err != nil {
		t.Fatalf("added device refused: %v", err)
	}
	if n := brokerCounter(t, s, "protocol_disconnects_total", "why", "credentials_revoked"); n != 2 {
		t.Fatalf("credentials_revoked disconnects %v, want 2", n)
	}

	// A broken file: the error names the line, not the content, and the
	// credentials in force do not change.
	if err := os.WriteFile(s.opts.MQTTAuthFile, []byte("dev-c:$2a$04$notahash-secretish\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.ReloadCredentials(); err == nil || !errors.Is(err, broker.ErrBadCredentialsFile) || strings.Contains(err.Error(), "secretish") {
		t.Fatalf("broken file: %v", err)
	}
	if _, err := connect("dev-c", "password-c"); err != nil {
		t.Fatalf("credentials lost after a failed reload: %v", err)
	}
}

func TestReloadWithoutCredentialsFile(t *testing.T) {
	s := startHub(t, testOptions(t, t.TempDir()))
	if _, _, err := s.ReloadCredentials(); !errors.Is(err, ErrNoCredentialsFile) {
		t.Fatalf("err %v", err)
	}
}

func copyFile(t testing.TB, from, to string) {
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
