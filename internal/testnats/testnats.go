// Package testnats runs real nats-server processes for tests: one node or
// a three-node cluster on loopback, each node with JetStream and an MQTT
// listener, its own store directory and ports chosen at run time. A test
// can SIGKILL a node and restart it on the same ports and store, which is
// how the cluster's replication is exercised rather than assumed.
//
// The server binary is looked up in $NATS_SERVER, then $(go env
// GOPATH)/bin, then PATH; without one the test is skipped with the command
// that installs it. The machine's own Debian nats-server (2.9) lacks the
// subject transforms the log needs and is refused for that reason.
package testnats

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"edgeflow/internal/testbroker"
	"edgeflow/internal/testproc"
)

// InstallHint is the command that installs the server version the tests
// are written against.
const InstallHint = "go install github.com/nats-io/nats-server/v2@v2.15.3"

// minMinor is the lowest 2.x minor release accepted: 2.10 brought stream
// subject transforms.
const minMinor = 10

// readyWithin bounds how long a node (or a whole cluster) may take to
// start and, for a cluster, to elect a JetStream meta leader.
const readyWithin = 30 * time.Second

// errExited marks a node whose process ended while it was starting.
var errExited = errors.New("exited during start-up")

// Node is one nats-server process of a Cluster.
type Node struct {
	Name string
	// Port is the client port, ClusterPort the route port (0 for a single
	// node) and MQTTPort the MQTT listener's.
	Port, ClusterPort, MQTTPort int
	// Dir holds the node's configuration, log and JetStream store; it
	// survives Kill and Restart.
	Dir string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// URL is the node's nats:// client URL.
func (n *Node) URL() string { return "nats://127.0.0.1:" + strconv.Itoa(n.Port) }

// MQTTURL is the node's MQTT listener as a paho broker URL.
func (n *Node) MQTTURL() string { return "tcp://127.0.0.1:" + strconv.Itoa(n.MQTTPort) }

func (n *Node) confPath() string { return filepath.Join(n.Dir, "nats.conf") }
func (n *Node) logPath() string  { return filepath.Join(n.Dir, "nats.log") }

// Cluster is a set of nats-server processes a test owns; every one is
// SIGKILLed when the test ends.
type Cluster struct {
	t     testing.TB
	bin   string
	base  string // parent of the nodes' directories
	Nodes []*Node
}

// Start runs size nodes (1, or 3 for a cluster) and waits until JetStream
// answers on every node, which for a cluster means a meta leader has been
// elected. Ports that another process takes between being chosen and
// being bound are chosen again.
func Start(t testing.TB, size int) *Cluster {
	t.Helper()
	if size < 1 {
		t.Fatalf("testnats: cluster size %d, want at least 1", size)
	}
	c := &Cluster{t: t, bin: Binary(t), base: t.TempDir()}
	// Registered after TempDir, so it runs before the directory's
	// removal: a live server would keep writing into it.
	t.Cleanup(c.killAll)
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		c.Nodes = c.newNodes(size)
		if lastErr = c.startAll(); lastErr == nil {
			return c
		}
		c.killAll()
	}
	t.Fatalf("testnats: %d-node cluster did not come up: %v", size, lastErr)
	return nil
}

// Binary finds nats-server 2.10 or later, or skips the test saying how to
// install it.
func Binary(t testing.TB) string {
	t.Helper()
	var candidates []string
	if p := os.Getenv("NATS_SERVER"); p != "" {
		candidates = append(candidates, p)
	}
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		for _, dir := range filepath.SplitList(strings.TrimSpace(string(out))) {
			candidates = append(candidates, filepath.Join(dir, "bin", "nats-server"))
		}
	}
	if home, err := os.UserHomeDir(); err == nil {
		candidates = append(candidates, filepath.Join(home, "go", "bin", "nats-server"))
	}
	if p, err := exec.LookPath("nats-server"); err == nil {
		candidates = append(candidates, p)
	}
	var refused []string
	for _, p := range candidates {
		if _, err := os.Stat(p); err != nil {
			continue
		}
		if err := checkVersion(p); err != nil {
			refused = append(refused, fmt.Sprintf("%s (%v)", p, err))
			continue
		}
		return p
	}
	if len(refused) > 0 {
		t.Skipf("no usable nats-server 2.%d+ (refused: %s); install one: %s, or set NATS_SERVER", minMinor, strings.Join(refused, "; "), InstallHint)
	}
	t.Skipf("nats-server not found in $NATS_SERVER, GOPATH/bin or PATH; install it: %s", InstallHint)
	return ""
}

var versionRE = regexp.MustCompile(`v2\.(\d+)\.\d+`)

// checkVersion runs bin --version and checks the release is recent enough.
func checkVersion(bin string) error {
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		return fmt.Errorf("--version: %v", err)
	}
	m := versionRE.FindStringSubmatch(string(out))
	if m == nil {
		return fmt.Errorf("unrecognised version %q", strings.TrimSpace(string(out)))
	}
	if minor, _ := strconv.Atoi(m[1]); minor < minMinor {
		return fmt.Errorf("version %s lacks stream subject transforms", m[0])
	}
	return nil
}

// probeTCP checks that addr accepts connections.
func probeTCP(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	return conn.Close()
}

// newNodes chooses ports and directories and writes each configuration.
func (c *Cluster) newNodes(size int) []*Node {
	nodes := make([]*Node, size)
	for i := range nodes {
		dir, err := os.MkdirTemp(c.base, "node")
		if err != nil {
			c.t.Fatal(err)
		}
		n := &Node{Name: fmt.Sprintf("n%d", i), Port: testbroker.FreePort(c.t), MQTTPort: testbroker.FreePort(c.t), Dir: dir}
		if size > 1 {
			n.ClusterPort = testbroker.FreePort(c.t)
		}
		nodes[i] = n
	}
	for _, n := range nodes {
		if err := os.WriteFile(n.confPath(), []byte(config(n, nodes)), 0o600); err != nil {
			c.t.Fatal(err)
		}
	}
	return nodes
}

// config is one node's configuration: JetStream with a store of its own,
// MQTT, and for a cluster the routes to every node.
func config(n *Node, all []*Node) string {
	var b strings.Builder
	fmt.Fprintf(&b, "server_name: %s\nlisten: 127.0.0.1:%d\n", n.Name, n.Port)
	fmt.Fprintf(&b, "jetstream {\n  store_dir: %q\n  max_memory_store: 256MB\n  max_file_store: 4GB\n}\n", filepath.Join(n.Dir, "js"))
	fmt.Fprintf(&b, "mqtt {\n  listen: 127.0.0.1:%d\n}\n", n.MQTTPort)
	if len(all) > 1 {
		var routes []string
		for _, o := range all {
			routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", o.ClusterPort))
		}
		fmt.Fprintf(&b, "cluster {\n  name: edgeflow-test\n  listen: 127.0.0.1:%d\n  routes: [%s]\n}\n", n.ClusterPort, strings.Join(routes, ", "))
	}
	return b.String()
}

// startAll starts every node, then waits for all of them to be ready.
func (c *Cluster) startAll() error {
	for _, n := range c.Nodes {
		if err := c.spawn(n); err != nil {
			return err
		}
	}
	for _, n := range c.Nodes {
		if err := c.waitReady(n, readyWithin); err != nil {
			return err
		}
	}
	return nil
}

// spawn starts n's process with its output appended to n's log.
func (c *Cluster) spawn(n *Node) error {
	logf, err := os.OpenFile(n.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(c.bin, "-c", n.confPath())
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", n.Name, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(exited) }()
	n.mu.Lock()
	n.cmd, n.exited = cmd, exited
	n.mu.Unlock()
	return nil
}

// waitReady waits until n's MQTT port accepts connections and JetStream
// answers an account request through n (which needs a meta leader).
func (c *Cluster) waitReady(n *Node, within time.Duration) error {
	deadline := time.Now().Add(within)
	var last error
	for time.Now().Before(deadline) {
		n.mu.Lock()
		exited := n.exited
		n.mu.Unlock()
		select {
		case <-exited:
			return fmt.Errorf("%s %w; log tail:\n%s", n.Name, errExited, tail(n.logPath()))
		default:
		}
		if last = probe(n); last == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s not ready within %v (last: %v); log tail:\n%s", n.Name, within, last, tail(n.logPath()))
}

// probe checks n's MQTT port and asks JetStream for the account's info.
func probe(n *Node) error {
	nc, err := nats.Connect(n.URL(), nats.Timeout(time.Second), nats.NoReconnect())
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
	return probeTCP(fmt.Sprintf("127.0.0.1:%d", n.MQTTPort))
}

// URLs is every node's client URL joined by commas, as nats.Connect takes
// them.
func (c *Cluster) URLs() string {
	urls := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		urls[i] = n.URL()
	}
	return strings.Join(urls, ",")
}

// Index returns the position of the node named name, or -1.
func (c *Cluster) Index(name string) int {
	for i, n := range c.Nodes {
		if n.Name == name {
			return i
		}
	}
	return -1
}

// Kill stops node i with SIGKILL, a crash rather than a shutdown; its
// store stays for Restart.
func (c *Cluster) Kill(i int) {
	n := c.Nodes[i]
	n.mu.Lock()
	cmd, exited := n.cmd, n.exited
	n.cmd = nil
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	if err := testproc.Kill(cmd, exited, 10*time.Second); err != nil {
		c.t.Errorf("testnats: %s: %v", n.Name, err)
	}
}

// Restart kills node i if it runs and starts it again with the same
// ports and store, waiting until JetStream answers through it.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	c.Kill(i)
	n := c.Nodes[i]
	var err error
	// A port the killed process held can be briefly unavailable; spawn
	// again while the node exits at start-up.
	for attempt := 0; attempt < 5; attempt++ {
		if err = c.spawn(n); err != nil {
			break
		}
		if err = c.waitReady(n, readyWithin); err == nil {
			return
		}
		if !errors.Is(err, errExited) {
			break
		}
		c.Kill(i)
		time.Sleep(200 * time.Millisecond)
	}
	c.t.Fatalf("testnats: restart %s: %v", n.Name, err)
}

func (c *Cluster) killAll() {
	for i := range c.Nodes {
		c.Kill(i)
	}
}

// LogTail returns the last lines of node i's log, for failure messages.
func (c *Cluster) LogTail(i int) string { return tail(c.Nodes[i].logPath()) }

// tail returns the last lines of a log file, for failure messages.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return strings.Join(lines, "\n")
}

// JetStream connects a client to the cluster's servers for a test (closed
// when it ends), as the hubs' tests inspect or change what JetStream holds.
func (c *Cluster) JetStream(t testing.TB) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(c.URLs())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}
