package hub

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/auth"
	"github.com/mochi-mqtt/server/v2/listeners"

	"edgeflow/internal/testbroker"
	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// tlsBroker starts a bare mochi broker whose only listener is TLS with a
// certificate for dnsName (no IP address, so a client must name the
// server) and that requires a client certificate from pki's CA. It returns
// the broker's host:port.
func tlsBroker(t *testing.T, pki *testPKI, dnsName string) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(77), Subject: pkix.Name{CommonName: dnsName}, DNSNames: []string{dnsName},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, pki.caCert, &key.PublicKey, pki.caKey)
	if err != nil {
		t.Fatal(err)
	}
	conf := &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pki.rootPool, MinVersion: tls.VersionTLS12}
	srv := mqtt.New(&mqtt.Options{InlineClient: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err := srv.AddHook(new(auth.AllowHook), nil); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", testbroker.FreePort(t))
	if err := srv.AddListener(listeners.NewTCP(listeners.Config{ID: "tls", Address: addr, TLSConfig: conf})); err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve() }()
	t.Cleanup(func() { _ = srv.Close() })
	return addr
}

// TestExternalBrokerTLS runs a hub on an external broker that speaks only
// mutual TLS under a name that is not in the URL: with the CA, its client
// certificate and the server name, the hub connects (through a tcp:// URL,
// dialled as ssl://) and acks a device's batch.
func TestExternalBrokerTLS(t *testing.T) {
	pki := newTestPKI(t)
	addr := tlsBroker(t, pki, "broker.test")
	hubCert, hubKey := pki.issue(t, "hubd", false)
	o := testOptions(t, t.TempDir())
	o.MQTTListen, o.MQTTURL, o.ClientID = "", "tcp://"+addr, "hub-tls-test"
	o.MQTTCAFile, o.MQTTCertFile, o.MQTTKeyFile, o.MQTTServerName = pki.caFile, hubCert, hubKey, "broker.test"
	s := startHub(t, o)
	waitFor(t, s.tr.Connected)

	devCert, devKey := pki.issue(t, "dev-tls", false)
	tc := pki.clientTLS(t, devCert, devKey)
	tc.ServerName = "broker.test"
	c, err := mqttClient(t, "ssl://"+addr, "edgeflow-dev-tls", "", "", tc, "")
	if err != nil {
		t.Fatalf("device connect: %v", err)
	}
	d := attachDevice(t, c, "dev-tls")
	if ack := d.send(makeBatch("dev-tls", d.stream, 1, 10)); ack.Status != wirepb.AckStatus_ACK_STATUS_OK {
		t.Fatalf("ack %v", ack)
	}
}

// TestExternalBrokerTLSOptions checks the options' validation and that a
// CA file that cannot be read stops the hub at start, naming the file.
func TestExternalBrokerTLSOptions(t *testing.T) {
	base := func() Options {
		o := testOptions(t, t.TempDir())
		o.MQTTListen, o.MQTTURL = "", "tcp://127.0.0.1:1"
		return o
	}
	for _, c := range []struct {
		name  string
		mut   func(*Options)
		field string
	}{
		{"cert without key", func(o *Options) { o.MQTTCertFile = "/x.pem" }, "MQTTCertFile"},
		{"tls without external broker", func(o *Options) { o.MQTTURL, o.MQTTListen, o.MQTTCAFile = "", "127.0.0.1:0", "/ca.pem" }, "MQTTCAFile"},
	} {
		o := base()
		c.mut(&o)
		o.EnsureDefaults()
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: %v, want an error naming %s", c.name, err, c.field)
		}
	}
	o := base()
	o.MQTTCAFile = "/nonexistent/ca.pem"
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	err = s.Start(t.Context())
	if err == nil {
		_ = s.Shutdown(t.Context())
		t.Fatal("started with an unreadable CA file")
	}
	if !strings.Contains(err.Error(), "/nonexistent/ca.pem") {
		t.Fatalf("error %q does not name the CA file", err)
	}
}

// batchACL is a broker ACL that lets nobody read batches until allow is
// set; everything else is allowed.
type batchACL struct {
	auth.AllowHook
	allow atomic.Bool
}

func (h *batchACL) ID() string { return "batch-acl" }
func (h *batchACL) OnACLCheck(_ *mqtt.Client, topic string, write bool) bool {
	return write || !strings.HasSuffix(topic, "/"+wire.KindBatch) || h.allow.Load()
}

// TestExternalSubscribeRefused runs the hub on an external broker whose ACL
// does not let it read batches: the broker refuses that one subscription
// (return code 0x80 inside a SUBACK that paho reports as a success). The
// hub must not call itself ready, must log which topic was refused, and
// must subscribe once the ACL lets it, without a restart.
func TestExternalSubscribeRefused(t *testing.T) {
	acl := new(batchACL)
	url, _ := testbroker.EmbeddedWith(t, acl)
	logs := &lockedBuffer{}
	o := testOptions(t, t.TempDir())
	o.Logger = slog.New(slog.NewTextHandler(logs, nil))
	o.MQTTURL, o.ClientID = url, "hub-acl-test"
	s := startHub(t, o)
	waitFor(t, func() bool { return strings.Contains(logs.String(), "refused the subscription") })
	if line := logs.String(); !strings.Contains(line, wire.TopicPrefix+"+/"+wire.KindBatch) || !strings.Contains(line, "ACL") {
		t.Fatalf("the log does not name the refused topic and the ACL:\n%s", line)
	}
	if s.Ready() {
		t.Fatal("ready without the batch subscription")
	}

	acl.allow.Store(true)
	waitFor(t, s.Ready) // the hub's retry (1 s, doubling) finds the ACL fixed
	d := newDevice(t, url, "acl1")
	if ack := d.send(makeBatch("acl1", d.stream, 1, 10)); ack.Status != wirepb.AckStatus_ACK_STATUS_OK {
		t.Fatalf("after the ACL fix: %v", ack)
	}
}

// TestExternalBrokerAcknowledges sends batches through a Mosquitto that
// holds back a subscriber's messages while two are unacknowledged: every
// batch is applied only if the hub sends each delivery's PUBACK (from
// ackLoop, not paho's goroutine for the message).
func TestExternalBrokerAcknowledges(t *testing.T) {
	url := testbroker.StartMosquitto(t, testbroker.MosquittoOptions{MaxInflight: 2}).URL()
	o := testOptions(t, t.TempDir())
	o.MQTTURL, o.ClientID = url, "hub-test-puback"
	s := startHub(t, o)
	waitReady(t, s)
	d := newDevice(t, url, "dev-p")
	const batches = 30
	for i := range batches {
		d.publish("", encodeBatch(t, makeBatch("dev-p", d.stream, uint64(10*i+1), 10)))
	}
	for i := range batches {
		if a := d.waitAck(uint64(10*i+1), 10*time.Second); a.Status != wirepb.AckStatus_ACK_STATUS_OK {
			t.Fatalf("batch %d: %v", i, a)
		}
	}
}
