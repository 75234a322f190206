// Package natsdeploy_test runs the NATS configuration of deploy/nats on
// three real nats-server processes and checks what it promises: TLS on
// every listener and route, devices confined to their own topics over
// MQTT, and hubd able to run the log, its buckets, acks and time answers.
package natsdeploy_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/crypto/bcrypt"

	"edgeflow/hub/natslog"
	"edgeflow/internal/testbroker"
	"edgeflow/internal/testnats"
	"edgeflow/internal/testproc"
)

// within bounds every wait; a failure says what it waited for.
const within = 60 * time.Second

// node is one server of the test cluster.
type node struct {
	name                               string
	port, mqttPort, clusterPort, httpP int
	dir                                string
	cmd                                *exec.Cmd
	exited                             chan struct{}
}

// cluster is the deploy configuration running on loopback.
type cluster struct {
	nodes     []*node
	tlsDir    string
	pool      *x509.CertPool
	passwords map[string]string // user -> plain password
	// asyncErrs receives the errors the server reports to hubd's
	// connection (permission violations).
	asyncErrs chan error
}

// TestDeployConfig starts deploy/nats/nats-server.conf (with accounts.conf
// and users.conf as committed) on three servers, ports, paths and
// certificates substituted, and checks the permissions it grants.
func TestDeployConfig(t *testing.T) {
	t.Run("committed users.conf", func(t *testing.T) { testDeployConfig(t, false) })
	// device-users.sh rewrites the device entries with bcrypt hashes
	// inline, as a fleet's users.conf has them.
	t.Run("users.conf from device-users.sh", func(t *testing.T) { testDeployConfig(t, true) })
}

func testDeployConfig(t *testing.T, generated bool) {
	c := startCluster(t, generated)
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()

	nc, js := c.hub(t)
	log, err := natslog.EnsureStream(ctx, js, natslog.Options{Partitions: 8, Replicas: 3})
	if err != nil {
		t.Fatalf("hubd: EnsureStream: %v", err)
	}

	// Devices connect over MQTT with TLS, their ids as usernames.
	a := c.device(t, "dev-a", "edgeflow-dev-a")
	b := c.device(t, "site.7", "edgeflow-site-7")
	if _, err := nats.Connect(c.nodes[0].url(), nats.UserInfo("dev-a", c.passwords["dev-a"]), nats.Secure(c.tlsConfig()), nats.NoReconnect()); err == nil {
		t.Fatal("device user dev-a connected over the NATS protocol; it is allowed MQTT only")
	}

	// Device A's batch lands in its partition; the hub reads it.
	a.publish(t, "edge/v1/dev-a/batch", "batch a1")
	got := readPartition(t, log, "dev-a", 1)
	if got[0].Device != "dev-a" || string(got[0].Data) != "batch a1" {
		t.Fatalf("read %q from %s, want dev-a's batch a1", got[0].Data, got[0].Device)
	}

	// A's batch on B's topic is not stored; A's next own batch is.
	err = a.tryPublish("edge/v1/site.7/batch", "forged by a")
	t.Logf("dev-a publishing on site.7's batch topic: %v", err)
	a = c.device(t, "dev-a", "edgeflow-dev-a") // NATS may have closed the connection
	a.publish(t, "edge/v1/dev-a/batch", "batch a2")
	b.publish(t, "edge/v1/site.7/batch", "batch b1")
	if got := readPartition(t, log, "dev-a", 2); string(got[1].Data) != "batch a2" {
		t.Fatalf("dev-a's second batch read as %q", got[1].Data)
	}
	gotB := readPartition(t, log, "site.7", 1)
	if string(gotB[0].Data) != "batch b1" || gotB[0].Device != "site.7" {
		t.Fatalf("site.7's partition starts with %q from %s, want its own batch b1", gotB[0].Data, gotB[0].Device)
	}
	if n := streamMessages(t, js); n != 3 {
		t.Fatalf("stream holds %d messages, want 3 (a1, a2, b1; not the forged one)", n)
	}

	// Subscriptions: a device may subscribe to its own acks, not another's
	// nor a wildcard over all devices.
	if code := a.subscribe(t, "edge/v1/site.7/ack"); code != 0x80 {
		t.Fatalf("dev-a subscribing to site.7's acks: SUBACK code %#x, want 0x80 (failure)", code)
	}
	if code := a.subscribe(t, "edge/v1/+/ack"); code != 0x80 {
		t.Fatalf("dev-a subscribing to every device's acks: SUBACK code %#x, want 0x80", code)
	}
	for _, d := range []*device{a, b} {
		for _, topic := range []string{"edge/v1/" + d.id + "/ack", "edge/v1/" + d.id + "/time/resp"} {
			if code := d.subscribe(t, topic); code != 1 {
				t.Fatalf("%s subscribing to %s: SUBACK code %#x, want 1 (QoS 1 granted)", d.id, topic, code)
			}
		}
	}

	// The hub acks both; each device gets its own ack only. B's ack is
	// published first, so A would have it before its own.
	for _, m := range [][2]string{{"edge.v1.site//7.ack", "ack for site.7"}, {"edge.v1.dev-a.ack", "ack for dev-a"}} {
		if err := nc.Publish(m[0], []byte(m[1])); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatalf("hubd publishing acks: %v", err)
	}
	b.expect(t, "edge/v1/site.7/ack", "ack for site.7")
	a.expect(t, "edge/v1/dev-a/ack", "ack for dev-a")
	if other := a.others("edge/v1/dev-a/ack"); len(other) != 0 {
		t.Fatalf("dev-a received %v besides its own ack", other)
	}

	// Time and status: the hub reads requests and statuses (a retained
	// status is what a last will is), and answers a time request.
	reqs := make(chan *nats.Msg, 16)
	for _, subj := range []string{"edge.v1.*.time.req", "edge.v1.*.status"} {
		if _, err := nc.ChanSubscribe(subj, reqs); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// hubd's subscriptions reach the device's server over a route a
	// moment after they reach hubd's own; until then NATS drops what
	// the device sends (core NATS is at most once), so the device sends
	// again until hubd has both, as an agent's time client retries.
	seen := map[string]string{}
	for len(seen) < 2 {
		if _, ok := seen["edge.v1.dev-a.time.req"]; !ok {
			a.publish(t, "edge/v1/dev-a/time/req", "what time is it")
		}
		if _, ok := seen["edge.v1.dev-a.status"]; !ok {
			a.publishRetained(t, "edge/v1/dev-a/status", "online")
		}
		for wait := time.After(time.Second); len(seen) < 2; {
			select {
			case m := <-reqs:
				seen[m.Subject] = string(m.Data)
				continue
			case <-wait:
			case <-ctx.Done():
				t.Fatalf("hubd received %v, want dev-a's time request and status", seen)
			}
			break
		}
	}
	if seen["edge.v1.dev-a.time.req"] != "what time is it" || seen["edge.v1.dev-a.status"] != "online" {
		t.Fatalf("hubd received %v", seen)
	}
	if err := nc.Publish("edge.v1.dev-a.time.resp", []byte("noon")); err != nil {
		t.Fatal(err)
	}
	a.expect(t, "edge/v1/dev-a/time/resp", "noon")

	// A device may not publish on its own ack topic (a forged ack would
	// make its agent drop a batch the hub never had). The forged ack goes
	// first, then a status hubd waits for, then hubd's real ack: had the
	// server accepted the forged one, it would reach the device first.
	if tok := a.cl.Publish("edge/v1/dev-a/ack", 0, false, "forged ack"); !tok.WaitTimeout(within) || tok.Error() != nil {
		t.Fatalf("dev-a publishing its own ack: %v", tok.Error())
	}
	a.publishRetained(t, "edge/v1/dev-a/status", "after the forged ack")
	for got := ""; got != "after the forged ack"; {
		select {
		case m := <-reqs:
			got = string(m.Data)
		case <-ctx.Done():
			t.Fatal("hubd did not receive dev-a's status after the forged ack")
		}
	}
	if err := nc.Publish("edge.v1.dev-a.ack", []byte("real ack")); err != nil {
		t.Fatal(err)
	}
	a.expect(t, "edge/v1/dev-a/ack", "real ack")
	a.mu.Lock()
	acks := a.got["edge/v1/dev-a/ack"]
	a.mu.Unlock()
	if slices.Contains(acks, "forged ack") {
		t.Fatalf("dev-a received its own forged ack (acks %v)", acks)
	}

	// The hub may not publish a device's batch (only devices write the
	// log): the server answers with a permissions violation.
	if err := nc.Publish("edge.v1.dev-a.batch", []byte("forged by the hub")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-c.asyncErrs:
		if !strings.Contains(err.Error(), `Permissions Violation for Publish to "edge.v1.dev-a.batch"`) {
			t.Fatalf("hubd publishing a batch: %v, want a permissions violation", err)
		}
	case <-ctx.Done():
		t.Fatal("hubd published a batch on edge.v1.dev-a.batch without a permissions violation")
	}

	// The hub's checkpoint and snapshot buckets work under its permissions.
	cp, err := natslog.OpenCheckpoints(ctx, js, natslog.CheckpointOptions{Replicas: 3})
	if err != nil {
		t.Fatalf("hubd: OpenCheckpoints: %v", err)
	}
	if _, err := cp.Save(ctx, 0, 3, []byte("state"), 0); err != nil {
		t.Fatalf("hubd: checkpoint save: %v", err)
	}
	snaps, err := natslog.OpenSnapshots(ctx, js, natslog.SnapshotOptions{Replicas: 3, MaxBytes: 8 << 20})
	if err != nil {
		t.Fatalf("hubd: OpenSnapshots: %v", err)
	}
	state := make([]byte, 1<<20)
	if _, err := rand.Read(state); err != nil {
		t.Fatal(err)
	}
	if _, err := snaps.Put(ctx, natslog.Snapshot{State: state, Positions: map[int]uint64{0: 3}, Hub: "hubd-1"}); err != nil {
		t.Fatalf("hubd: snapshot put: %v", err)
	}
	if s, err := snaps.Latest(ctx); err != nil || len(s.State) != len(state) {
		t.Fatalf("hubd: snapshot latest: %d bytes, %v", len(s.State), err)
	}
}

// readPartition reads the first n messages of device's partition.
func readPartition(t *testing.T, log *natslog.Log, device string, n int) []natslog.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	p := natslog.PartitionOf(device, log.Options().Partitions)
	r, err := log.Reader(ctx, p, 0)
	if err != nil {
		t.Fatalf("hubd: reader of partition %d: %v", p, err)
	}
	defer r.Close()
	var out []natslog.Message
	for len(out) < n {
		m, err := r.Next(ctx)
		if err != nil {
			t.Fatalf("hubd: partition %d: read %d of %d messages, then %v", p, len(out), n, err)
		}
		out = append(out, m)
	}
	return out
}

// streamMessages is how many messages the log's stream holds.
func streamMessages(t *testing.T, js jetstream.JetStream) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	s, err := js.Stream(ctx, natslog.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	return s.CachedInfo().State.Msgs
}

// device is an MQTT client connected as a device user.
type device struct {
	id string
	cl mqtt.Client
	mu sync.Mutex
	// got holds every message received, by topic.
	got map[string][]string
	in  chan struct{}
}

func (c *cluster) device(t *testing.T, user, clientID string) *device {
	t.Helper()
	d := &device{id: user, got: map[string][]string{}, in: make(chan struct{}, 64)}
	o := mqtt.NewClientOptions().AddBroker("ssl://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(c.nodes[1].mqttPort))).
		SetClientID(clientID).SetUsername(user).SetPassword(c.passwords[user]).
		SetTLSConfig(c.tlsConfig()).SetProtocolVersion(4).SetCleanSession(true).
		SetAutoReconnect(false).SetConnectTimeout(10 * time.Second).
		SetDefaultPublishHandler(func(_ mqtt.Client, m mqtt.Message) {
			d.mu.Lock()
			d.got[m.Topic()] = append(d.got[m.Topic()], string(m.Payload()))
			d.mu.Unlock()
			select {
			case d.in <- struct{}{}:
			default:
			}
		})
	d.cl = mqtt.NewClient(o)
	if tok := d.cl.Connect(); !tok.WaitTimeout(within) || tok.Error() != nil {
		t.Fatalf("mqtt connect as %s: %v", user, tok.Error())
	}
	t.Cleanup(func() { d.cl.Disconnect(100) })
	return d
}

// tryPublish publishes at QoS 1 and returns what came of waiting for the
// PUBACK.
func (d *device) tryPublish(topic, payload string) error {
	tok := d.cl.Publish(topic, 1, false, payload)
	if !tok.WaitTimeout(5 * time.Second) {
		return errors.New("no PUBACK within 5s")
	}
	return tok.Error()
}

func (d *device) publish(t *testing.T, topic, payload string) {
	t.Helper()
	if err := d.tryPublish(topic, payload); err != nil {
		t.Fatalf("%s publishing on %s: %v", d.id, topic, err)
	}
}

func (d *device) publishRetained(t *testing.T, topic, payload string) {
	t.Helper()
	tok := d.cl.Publish(topic, 1, true, payload)
	if !tok.WaitTimeout(within) || tok.Error() != nil {
		t.Fatalf("%s publishing retained on %s: %v", d.id, topic, tok.Error())
	}
}

// subscribe subscribes at QoS 1 and returns the SUBACK's return code.
func (d *device) subscribe(t *testing.T, topic string) byte {
	t.Helper()
	tok := d.cl.Subscribe(topic, 1, nil)
	if !tok.WaitTimeout(within) {
		t.Fatalf("%s subscribing to %s: no SUBACK", d.id, topic)
	}
	st := tok.(*mqtt.SubscribeToken)
	code, ok := st.Result()[topic]
	if !ok {
		t.Fatalf("%s subscribing to %s: SUBACK without the topic (%v)", d.id, topic, tok.Error())
	}
	return code
}

// expect waits until payload arrives on topic.
func (d *device) expect(t *testing.T, topic, payload string) {
	t.Helper()
	deadline := time.After(within)
	for {
		d.mu.Lock()
		msgs := d.got[topic]
		d.mu.Unlock()
		for _, m := range msgs {
			if m == payload {
				return
			}
		}
		select {
		case <-d.in:
		case <-deadline:
			t.Fatalf("%s did not receive %q on %s within %v (got %v)", d.id, payload, topic, within, msgs)
		}
	}
}

// others returns what arrived on topics other than topic.
func (d *device) others(topic string) map[string][]string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string][]string{}
	for k, v := range d.got {
		if k != topic {
			out[k] = v
		}
	}
	return out
}

// hub connects as hubd over TLS.
func (c *cluster) hub(t *testing.T) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(c.urls(), nats.UserInfo("hubd", c.passwords["hubd"]), nats.Secure(c.tlsConfig()),
		nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case c.asyncErrs <- err:
			default:
			}
		}))
	if err != nil {
		t.Fatalf("connect as hubd: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

func (c *cluster) tlsConfig() *tls.Config {
	return &tls.Config{RootCAs: c.pool, MinVersion: tls.VersionTLS12}
}

func (n *node) url() string { return "tls://127.0.0.1:" + strconv.Itoa(n.port) }

func (c *cluster) urls() string {
	var u []string
	for _, n := range c.nodes {
		u = append(u, n.url())
	}
	return strings.Join(u, ",")
}

// startCluster writes each node's copy of the deploy configuration and
// starts the three servers, waiting until JetStream answers hubd on each.
func startCluster(t *testing.T, generated bool) *cluster {
	t.Helper()
	bin := testnats.Binary(t)
	base := t.TempDir()
	c := &cluster{tlsDir: filepath.Join(base, "tls"), passwords: map[string]string{}, asyncErrs: make(chan error, 16)}
	c.pool = writeCerts(t, c.tlsDir)
	env := []string{}
	hashes := map[string]string{}
	for user, v := range map[string]string{
		"admin": "EDGEFLOW_ADMIN_PASSWORD", "hubd": "EDGEFLOW_HUBD_PASSWORD",
		"dev-a": "EDGEFLOW_DEV_A_PASSWORD", "site.7": "EDGEFLOW_DEV_SITE_7_PASSWORD",
	} {
		var r [12]byte
		if _, err := rand.Read(r[:]); err != nil {
			t.Fatal(err)
		}
		c.passwords[user] = hex.EncodeToString(r[:])
		hash, err := bcrypt.GenerateFromPassword([]byte(c.passwords[user]), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		env = append(env, v+"="+string(hash))
		hashes[user] = string(hash)
	}
	users, err := os.ReadFile("users.conf")
	if err != nil {
		t.Fatal(err)
	}
	if generated {
		cmd := exec.Command("./device-users.sh", "users.conf")
		cmd.Stdin = strings.NewReader(fmt.Sprintf("# the fleet\ndev-a %s\n\nsite.7 %s\n", hashes["dev-a"], hashes["site.7"]))
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if users, err = cmd.Output(); err != nil {
			t.Fatalf("device-users.sh: %v: %s", err, stderr.String())
		}
		if strings.Contains(string(users), "EDGEFLOW_DEV_") {
			t.Fatalf("device-users.sh kept the example devices:\n%s", users)
		}
	}
	for i := range 3 {
		n := &node{name: fmt.Sprintf("nats-%d", i+1), port: testbroker.FreePort(t), mqttPort: testbroker.FreePort(t),
			clusterPort: testbroker.FreePort(t), httpP: testbroker.FreePort(t), dir: filepath.Join(base, fmt.Sprintf("n%d", i+1))}
		if err := os.MkdirAll(n.dir, 0o700); err != nil {
			t.Fatal(err)
		}
		c.nodes = append(c.nodes, n)
	}
	for _, n := range c.nodes {
		c.writeConfig(t, n, users)
	}
	t.Cleanup(func() {
		for _, n := range c.nodes {
			if n.cmd != nil {
				if err := testproc.Kill(n.cmd, n.exited, 10*time.Second); err != nil {
					t.Errorf("%s: %v", n.name, err)
				}
			}
		}
	})
	for _, n := range c.nodes {
		logf, err := os.Create(filepath.Join(n.dir, "nats.log"))
		if err != nil {
			t.Fatal(err)
		}
		n.cmd = exec.Command(bin, "-c", filepath.Join(n.dir, "nats-server.conf"))
		n.cmd.Env = append(os.Environ(), append(env, "NATS_SERVER_NAME="+n.name)...)
		n.cmd.Stdout, n.cmd.Stderr = logf, logf
		if err := n.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		n.exited = make(chan struct{})
		go func(n *node, f *os.File) { _ = n.cmd.Wait(); f.Close(); close(n.exited) }(n, logf)
	}
	for _, n := range c.nodes {
		c.waitReady(t, n)
	}
	return c
}

// waitReady waits until JetStream answers hubd through n and n's MQTT
// listener accepts connections.
func (c *cluster) waitReady(t *testing.T, n *node) {
	t.Helper()
	deadline := time.Now().Add(within)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-n.exited:
			t.Fatalf("%s exited during start-up; log:\n%s", n.name, logTail(n))
		default:
		}
		if last = c.probe(n); last == nil {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("%s not ready within %v: %v; log:\n%s", n.name, within, last, logTail(n))
}

func (c *cluster) probe(n *node) error {
	nc, err := nats.Connect(n.url(), nats.UserInfo("hubd", c.passwords["hubd"]), nats.Secure(c.tlsConfig()), nats.NoReconnect(), nats.Timeout(2*time.Second))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := js.AccountInfo(ctx); err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	conn, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(n.mqttPort)), time.Second)
	if err != nil {
		return err
	}
	return conn.Close()
}

func logTail(n *node) string {
	b, _ := os.ReadFile(filepath.Join(n.dir, "nats.log"))
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-25):], "\n")
}

// writeConfig writes the three configuration files into n's directory
// (users.conf as given),
// replacing in nats-server.conf exactly the listen addresses, routes and
// paths a loopback test must change. A replaced string that is missing
// fails the test: the configuration changed under it.
func (c *cluster) writeConfig(t *testing.T, n *node, users []byte) {
	t.Helper()
	accounts, err := os.ReadFile("accounts.conf")
	if err != nil {
		t.Fatal(err)
	}
	for f, b := range map[string][]byte{"accounts.conf": accounts, "users.conf": users} {
		if err := os.WriteFile(filepath.Join(n.dir, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile("nats-server.conf")
	if err != nil {
		t.Fatal(err)
	}
	conf := string(b)
	repl := []struct {
		old, new string
		times    int
	}{
		{"listen: 0.0.0.0:4222", fmt.Sprintf("listen: 127.0.0.1:%d", n.port), 1},
		{"listen: 0.0.0.0:8883", fmt.Sprintf("listen: 127.0.0.1:%d", n.mqttPort), 1},
		{"listen: 0.0.0.0:6222", fmt.Sprintf("listen: 127.0.0.1:%d", n.clusterPort), 1},
		{"http: 127.0.0.1:8222", fmt.Sprintf("http: 127.0.0.1:%d", n.httpP), 1},
		{`"/etc/nats/tls/`, `"` + c.tlsDir + "/", 8},
		{`"/var/lib/nats/jetstream"`, strconv.Quote(filepath.Join(n.dir, "js")), 1},
		{"max_file_store: 64GB", "max_file_store: 2GB", 1},
	}
	for i, o := range c.nodes {
		repl = append(repl, struct {
			old, new string
			times    int
		}{fmt.Sprintf("nats-route://nats-%d.edgeflow.internal:6222", i+1), fmt.Sprintf("nats-route://127.0.0.1:%d", o.clusterPort), 1})
	}
	for _, r := range repl {
		if got := strings.Count(conf, r.old); got != r.times {
			t.Fatalf("deploy/nats/nats-server.conf has %q %d times, the test expects %d", r.old, got, r.times)
		}
		conf = strings.ReplaceAll(conf, r.old, r.new)
	}
	if err := os.WriteFile(filepath.Join(n.dir, "nats-server.conf"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
}

// writeCerts writes a CA and a server certificate for 127.0.0.1 (server
// and client authentication, as the routes use it both ways) where the
// configuration expects them, and returns a pool trusting the CA.
func writeCerts(t *testing.T, dir string) *x509.CertPool {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "edgeflow test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "nats"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	for name, block := range map[string]*pem.Block{
		"ca.crt":     {Type: "CERTIFICATE", Bytes: caDER},
		"server.crt": {Type: "CERTIFICATE", Bytes: der},
		"server.key": {Type: "EC PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	return pool
}
