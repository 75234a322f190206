package hub

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	dto "github.com/prometheus/client_model/go"

	"edgeflow/hub/batchview"
	"edgeflow/hub/broker"
	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// writeCredentials writes a credentials file for device:password pairs.
func writeCredentials(t testing.TB, pairs ...string) string {
	t.Helper()
	var b strings.Builder
	for i := 0; i < len(pairs); i += 2 {
		line, err := broker.HashPassword(pairs[i], []byte(pairs[i+1]), 4) // bcrypt.MinCost: fast tests
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

// mqttClient connects a paho client; err is the connection's error.
func mqttClient(t testing.TB, broker, clientID, user, pass string, tc *tls.Config, will string) (paho.Client, error) {
	t.Helper()
	o := paho.NewClientOptions().AddBroker(broker).SetClientID(clientID).SetCleanSession(true).
		SetAutoReconnect(false).SetConnectTimeout(30 * time.Second).SetOrderMatters(false).
		SetProtocolVersion(4) // no fallback to 3.1: one attempt per connect
	if user != "" {
		o.SetUsername(user).SetPassword(pass)
	}
	if tc != nil {
		o.SetTLSConfig(tc)
	}
	if will != "" {
		o.SetWill(will, "bye", 1, true)
	}
	c := paho.NewClient(o)
	// Generous: a bcrypt comparison under -race on a loaded machine takes
	// seconds (a hang guard, not a timing claim).
	tok := c.Connect()
	if !tok.WaitTimeout(40 * time.Second) {
		return nil, os.ErrDeadlineExceeded
	}
	if tok.Error() != nil {
		return nil, tok.Error()
	}
	t.Cleanup(func() { c.Disconnect(50) })
	return c, nil
}

// brokerCounter reads a counter of the embedded broker from the hub's
// registry: edgeflow_hub_broker_<name>, with the label pairs given
// (name, value, ...); 0 when the registry has no such series.
func brokerCounter(t testing.TB, s *Server, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := s.opts.Gatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "edgeflow_hub_broker_"+name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				if !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == labels[i] && l.GetValue() == labels[i+1] }) {
					continue series
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// subscribeCode subscribes and returns the SUBACK's code (0x80: refused).
func subscribeCode(t *testing.T, c paho.Client, filter string) byte {
	t.Helper()
	tok := c.Subscribe(filter, 1, func(paho.Client, paho.Message) {})
	if !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe %s: %v", filter, tok.Error())
	}
	for _, code := range tok.(*paho.SubscribeToken).Result() { // keyed without a $share/ prefix
		return code
	}
	t.Fatalf("subscribe %s: no result", filter)
	return 0
}

// securedHub starts a hub whose embedded broker knows dev-a and dev-b by
// password and refuses anonymous clients.
func securedHub(t *testing.T, mut func(*Options)) (*Server, string) {
	o := testOptions(t, t.TempDir())
	o.MQTTAuthFile = writeCredentials(t, "dev-a", "password-a", "dev-b", "password-b")
	o.MQTTDenyAnonymous = true
	if mut != nil {
		mut(&o)
	}
	s := startHub(t, o)
	return s, "tcp://" + s.BrokerAddr()
}

func TestBrokerPasswords(t *testing.T) {
	s, url := securedHub(t, nil)
	if _, err := mqttClient(t, url, "edgeflow-dev-a", "dev-a", "wrong", nil, ""); err == nil {
		t.Fatal("wrong password accepted")
	}
	if _, err := mqttClient(t, url, "edgeflow-dev-x", "dev-x", "password-a", nil, ""); err == nil {
		t.Fatal("unknown device accepted")
	}
	if _, err := mqttClient(t, url, "anon", "", "", nil, ""); err == nil {
		t.Fatal("anonymous client accepted with DenyAnonymous")
	}
	// An unknown device costs a bcrypt comparison too (slow under -race):
	// the client may give up before the broker has counted it.
	waitFor(t, func() bool { return brokerCounter(t, s, "refused_connections_total", "why", "bad_credentials") == 2 })
	waitFor(t, func() bool { return brokerCounter(t, s, "refused_connections_total", "why", "no_credentials") >= 1 })
	if n := brokerCounter(t, s, "refused_connections_total", "why", "no_credentials"); n != 1 {
		t.Fatalf("no_credentials refusals %v, want 1", n)
	}
	// The right password works end to end: a batch is acked OK.
	a := securedDevice(t, url, "dev-a", "password-a")
	if ack := a.send(makeBatch("dev-a", a.stream, 1, 10)); ack.Status != wirepb.AckStatus_ACK_STATUS_OK {
		t.Fatalf("ack %v", ack)
	}
}

// securedDevice is newDevice with a username and password.
func securedDevice(t *testing.T, url, id, pass string) *device {
	t.Helper()
	c, err := mqttClient(t, url, "edgeflow-"+id, id, pass, nil, "")
	if err != nil {
		t.Fatalf("%s connect: %v", id, err)
	}
	return attachDevice(t, c, id)
}

// attachDevice makes a device of a connected client: it subscribes to the
// device's acks.
func attachDevice(t *testing.T, c paho.Client, id string) *device {
	t.Helper()
	d := &device{t: t, id: id, stream: wire.NewStreamID(), acks: map[uint64]*wirepb.Ack{}, got: make(chan struct{}, 1), c: c}
	tok := c.Subscribe(wire.AckTopic(id), 1, func(_ paho.Client, m paho.Message) {
		a, err := wire.DecodeAck(m.Payload(), wire.Limits{})
		if err != nil {
			return
		}
		d.mu.Lock()
		d.acks[a.FirstSeq] = a
		d.mu.Unlock()
		select {
		case d.got <- struct{}{}:
		default:
		}
	})
	if !tok.WaitTimeout(5*time.Second) || tok.Error() != nil || tok.(*paho.SubscribeToken).Result()[wire.AckTopic(id)] == 0x80 {
		t.Fatalf("%s: subscribe own acks: %v", id, tok.Error())
	}
	return d
}

func TestBrokerTopicPermissions(t *testing.T) {
	s, url := securedHub(t, nil)
	a := securedDevice(t, url, "dev-a", "password-a")

	// Subscriptions: only its own ack and time response, no wildcards.
	for _, f := range []string{wire.AckTopic("dev-b"), wire.TimeRespTopic("dev-b"), "edge/v1/+/ack", "#", wire.BatchTopic("dev-a"), "$share/g/" + wire.AckTopic("dev-b")} {
		if code := subscribeCode(t, a.c, f); code != 0x80 {
			t.Errorf("subscribe %s: code %#x, want 0x80 (refused)", f, code)
		}
	}
	if code := subscribeCode(t, a.c, wire.TimeRespTopic("dev-a")); code == 0x80 {
		t.Error("own time response refused")
	}
	if n := brokerCounter(t, s, "acl_denied_total", "action", "subscribe"); n != 6 {
		t.Errorf("denied subscriptions %v, want 6", n)
	}

	// dev-b's acks never reach dev-a, even when dev-b is busy.
	leak := make(chan string, 1)
	a.c.Subscribe(wire.AckTopic("dev-b"), 1, func(_ paho.Client, msg paho.Message) { leak <- msg.Topic() })
	b := securedDevice(t, url, "dev-b", "password-b")
	if ack := b.send(makeBatch("dev-b", b.stream, 1, 5)); ack.Status != wirepb.AckStatus_ACK_STATUS_OK {
		t.Fatalf("dev-b ack %v", ack)
	}

	// Publishing for dev-b: MQTT 3.1.1 has no negative PUBACK, so the broker
	// drops the connection; the hub never sees the batch.
	forged := encodeBatch(t, makeBatch("dev-b", b.stream, 6, 5))
	a.c.Publish(wire.BatchTopic("dev-b"), 1, false, forged).WaitTimeout(2 * time.Second)
	waitFor(t, func() bool { return brokerCounter(t, s, "acl_denied_total", "action", "publish") == 1 })
	// dev-b's own 5 events reach the registry after their ack (the applier).
	waitFor(t, func() bool { i, _ := s.Device("dev-b"); return len(i.Streams) > 0 && i.Streams[0].Events >= 5 })
	time.Sleep(100 * time.Millisecond)
	if info, _ := s.Device("dev-b"); len(info.Streams) != 1 || info.Streams[0].Events != 5 {
		t.Fatalf("dev-b after a forged batch: %+v", info.Streams)
	}
	select {
	case topic := <-leak:
		t.Fatalf("dev-a received %s", topic)
	default:
	}
	if a.c.IsConnectionOpen() {
		t.Error("dev-a still connected after an unauthorized publish")
	}

	// A last will on another device's status topic is refused at CONNECT.
	if _, err := mqttClient(t, url, "edgeflow-dev-a-w", "dev-a", "password-a", nil, wire.StatusTopic("dev-b")); err == nil {
		t.Error("will on dev-b's status accepted")
	}
	// So is taking over dev-b's session by its client id.
	if _, err := mqttClient(t, url, "edgeflow-dev-b", "dev-a", "password-a", nil, ""); err == nil {
		t.Error("dev-a took over dev-b's client id")
	}
	if !b.c.IsConnectionOpen() {
		t.Error("dev-b lost its connection to a takeover attempt")
	}
}

func TestBrokerConnectionLimit(t *testing.T) {
	s, url := securedHub(t, func(o *Options) { o.MQTTMaxConnsPerDevice = 2 })
	for _, id := range []string{"a1", "a2"} {
		if _, err := mqttClient(t, url, id, "dev-a", "password-a", nil, ""); err != nil {
			t.Fatalf("connection %s: %v", id, err)
		}
	}
	if _, err := mqttClient(t, url, "a3", "dev-a", "password-a", nil, ""); err == nil {
		t.Fatal("third connection accepted with a limit of 2")
	}
	// A reconnect with a held client id takes its session over: allowed.
	if _, err := mqttClient(t, url, "a1", "dev-a", "password-a", nil, ""); err != nil {
		t.Fatalf("takeover of own session: %v", err)
	}
	if _, err := mqttClient(t, url, "b1", "dev-b", "password-b", nil, ""); err != nil {
		t.Fatalf("another device: %v", err)
	}
	if n := brokerCounter(t, s, "refused_connections_total", "why", "too_many_connections"); n != 1 {
		t.Fatalf("too_many_connections %v, want 1", n)
	}
}

// testPKI is a CA, a server certificate for 127.0.0.1 and client
// certificates, written as PEM files.
type testPKI struct {
	dir      string
	caCert   *x509.Certificate
	caKey    *ecdsa.PrivateKey
	caFile   string
	srvCert  string
	srvKey   string
	rootPool *x509.CertPool
}

func newTestPKI(t testing.TB) *testPKI {
	t.Helper()
	p := &testPKI{dir: t.TempDir()}
	p.caCert, p.caKey = selfSignedCA(t, "edgeflow test CA")
	p.caFile = p.writePEM(t, "ca.pem", "CERTIFICATE", p.caCert.Raw)
	p.rootPool = x509.NewCertPool()
	p.rootPool.AddCert(p.caCert)
	p.srvCert, p.srvKey = p.issue(t, "hub", true)
	return p
}

func selfSignedCA(t testing.TB, cn string) (*x509.Certificate, *ecdsa.PrivateKey) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return c, key
}

func (p *testPKI) writePEM(t testing.TB, name, typ string, der []byte) string {
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// issue signs a certificate for cn (a server's for 127.0.0.1, or a
// client's) and returns its cert and key files.
func (p *testPKI) issue(t testing.TB, cn string, server bool) (certFile, keyFile string) {
	return p.issueBy(t, cn, server, p.caCert, p.caKey)
}

func (p *testPKI) issueBy(t testing.TB, cn string, server bool, ca *x509.Certificate, caKey *ecdsa.PrivateKey) (string, string) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	name := serial.String()
	return p.writePEM(t, name+".pem", "CERTIFICATE", der), p.writePEM(t, name+"-key.pem", "EC PRIVATE KEY", kder)
}

// clientTLS is a client's TLS config with the cert (if any).
func (p *testPKI) clientTLS(t testing.TB, certFile, keyFile string) *tls.Config {
	c := &tls.Config{RootCAs: p.rootPool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c
}

func TestBrokerClientCertificates(t *testing.T) {
	pki := newTestPKI(t)
	o := testOptions(t, t.TempDir())
	o.MQTTTLSCertFile, o.MQTTTLSKeyFile, o.MQTTTLSClientCAFile = pki.srvCert, pki.srvKey, pki.caFile
	o.MQTTDenyAnonymous = true
	s := startHub(t, o)
	url := "ssl://" + s.BrokerAddr()

	// A certificate from the fleet CA: its CN is the device id.
	cert, key := pki.issue(t, "dev-c", false)
	c, err := mqttClient(t, url, "edgeflow-dev-c", "", "", pki.clientTLS(t, cert, key), "")
	if err != nil {
		t.Fatalf("valid client certificate refused: %v", err)
	}
	d := attachDevice(t, c, "dev-c")
	if ack := d.send(makeBatch("dev-c", d.stream, 1, 10)); ack.Status != wirepb.AckStatus_ACK_STATUS_OK {
		t.Fatalf("ack %v", ack)
	}
	if code := subscribeCode(t, c, wire.AckTopic("dev-d")); code != 0x80 {
		t.Fatalf("dev-c subscribed to dev-d's acks (code %#x)", code)
	}

	// A certificate from another CA fails the handshake.
	otherCA, otherKey := selfSignedCA(t, "someone else")
	bad, badKey := pki.issueBy(t, "dev-c", false, otherCA, otherKey)
	if _, err := mqttClient(t, url, "edgeflow-dev-c2", "", "", pki.clientTLS(t, bad, badKey), ""); err == nil {
		t.Fatal("certificate of an unknown CA accepted")
	}
	// No certificate and no password: anonymous, refused.
	if _, err := mqttClient(t, url, "anon", "", "", pki.clientTLS(t, "", ""), ""); err == nil {
		t.Fatal("client without a certificate accepted")
	}
	// A username that differs from the certificate's CN.
	if _, err := mqttClient(t, url, "edgeflow-dev-c3", "dev-d", "x", pki.clientTLS(t, cert, key), ""); err == nil {
		t.Fatal("username other than the certificate's CN accepted")
	}
	// A CN that is not a device id.
	weird, weirdKey := pki.issue(t, "dev/+", false)
	if _, err := mqttClient(t, url, "edgeflow-weird", "", "", pki.clientTLS(t, weird, weirdKey), ""); err == nil {
		t.Fatal("certificate with CN dev/+ accepted")
	}
	if n := brokerCounter(t, s, "refused_connections_total", "why", "bad_identity"); n != 2 {
		t.Fatalf("bad_identity refusals %v, want 2", n)
	}
}

// TestIdentityMismatchRejected checks the hub's own check, independent of
// the broker's ACL: a batch published by dev-a for dev-b is not applied.
func TestIdentityMismatchRejected(t *testing.T) {
	s := startHub(t, testOptions(t, t.TempDir()))
	b := makeBatch("dev-b", wire.NewStreamID(), 1, 5)
	s.handleFrom(wire.BatchTopic("dev-b"), "dev-a", encodeBatch(t, b))
	if n := counterValue(t, s.m.rejected.WithLabelValues(string(batchview.ReasonIdentityMismatch))); n != 1 {
		t.Fatalf("identity_mismatch %v, want 1", n)
	}
	s.handleFrom(wire.BatchTopic("dev-b"), "dev-b", encodeBatch(t, b))
	waitFor(t, func() bool { i, ok := s.Device("dev-b"); return ok && len(i.Streams) == 1 && i.Streams[0].Events == 5 })
}

func TestRateLimited(t *testing.T) {
	o := testOptions(t, t.TempDir())
	o.MaxEventsPerSecond, o.EventsBurst = 100, 100
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	var clock = now
	o.Now = func() time.Time { return clock }
	s := startHub(t, o)
	d := newDevice(t, "tcp://"+s.BrokerAddr(), "dev-r")
	if ack := d.send(makeBatch("dev-r", d.stream, 1, 150)); ack.Status != wirepb.AckStatus_ACK_STATUS_OK {
		t.Fatalf("first batch (bucket full): %v", ack)
	}
	ack := d.send(makeBatch("dev-r", d.stream, 151, 10))
	if ack.Status != wirepb.AckStatus_ACK_STATUS_RETRY_LATER || !strings.HasPrefix(ack.Reason, "rate_limited") || ack.RetryAfterNs <= 0 {
		t.Fatalf("batch over the rate: %v", ack)
	}
	if n := counterValue(t, s.m.batches.WithLabelValues("retry_later")); n != 1 {
		t.Fatalf("retry_later batches %v, want 1", n)
	}
	if n := counterValue(t, s.m.rejected.WithLabelValues(string(batchview.ReasonRateLimited))); n != 1 {
		t.Fatalf("rate_limited %v, want 1", n)
	}
	// Other devices are not affected.
	e := newDevice(t, "tcp://"+s.BrokerAddr(), "dev-s")
	if ack := e.send(makeBatch("dev-s", e.stream, 1, 10)); ack.Status != wirepb.AckStatus_ACK_STATUS_OK {
		t.Fatalf("other device: %v", ack)
	}
}
