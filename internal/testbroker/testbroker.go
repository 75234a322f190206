// Package testbroker starts the MQTT brokers that tests run against: a real
// Mosquitto process and the embedded mochi broker, each on a loopback port
// chosen at run time. It is imported by tests only; keeping it in one place
// keeps every package's broker handling the same (skip when Mosquitto is
// missing, SIGKILL on cleanup, restart on the same port).
package testbroker

import (
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/auth"
	"github.com/mochi-mqtt/server/v2/listeners"

	"edgeflow/internal/testproc"
)

// FreePort returns a loopback TCP port that was free a moment ago, chosen
// below the kernel's ephemeral range. A port from that range (what
// listening on port 0 gives) can be taken before the test binds it by any
// outgoing connection, among them a client that retries connecting to the
// port while nothing listens on it yet: Linux may give such a client the
// very port as its source and connect it to itself, and the server started
// later then fails with "address already in use".
func FreePort(t testing.TB) int {
	t.Helper()
	lo := ephemeralLow()
	const base = 15000 // above the usual fixed service ports
	for range 200 {
		port := base + rand.IntN(max(lo-base, 1))
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			l.Close()
			return port
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// ephemeralLow is the lowest port of the kernel's ephemeral range
// (Linux's default 32768 where the range cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil || lo <= 15000 {
		return 32768
	}
	return lo
}

// WaitTCP waits until addr accepts connections, failing the test after within.
func WaitTCP(t testing.TB, addr string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
			c.Close()
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s did not answer within %v", addr, within)
}

// MosquittoOptions tune a test Mosquitto.
type MosquittoOptions struct {
	// Persistence keeps sessions and queued messages across a Restart (in
	// the test's temporary directory).
	Persistence bool
	// MaxInflight is max_inflight_messages; 0 means unlimited.
	MaxInflight int
	// Secure refuses anonymous clients and adds Conf (password_file,
	// acl_file, ... lines) to the configuration.
	Secure bool
	// Conf is appended to the configuration when Secure is set.
	Conf string
	// Nagle leaves set_tcp_nodelay off (Mosquitto's default), to measure
	// what it costs.
	Nagle bool
}

// Mosquitto is a broker process a test owns.
type Mosquitto struct {
	t    testing.TB
	bin  string
	port int
	conf string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// mosquittoBinary finds the broker, or skips the test with what to install.
func mosquittoBinary(t testing.TB) string {
	if _, err := os.Stat("/usr/sbin/mosquitto"); err == nil {
		return "/usr/sbin/mosquitto"
	}
	bin, err := exec.LookPath("mosquitto")
	if err != nil {
		t.Skip("mosquitto is not installed (Debian: apt-get install mosquitto)")
	}
	return bin
}

// StartMosquitto runs Mosquitto on a free loopback port until the test ends,
// or skips the test if the binary is not installed.
func StartMosquitto(t testing.TB, o MosquittoOptions) *Mosquitto {
	t.Helper()
	m := &Mosquitto{t: t, bin: mosquittoBinary(t), port: FreePort(t)}
	dir := t.TempDir()
	m.conf = filepath.Join(dir, "mosquitto.conf")
	// set_tcp_nodelay, as docs/OPERATIONS.md advises for a hub's broker:
	// with Nagle's algorithm Mosquitto holds each small write (a PUBACK,
	// the hub's ack) until the device's delayed ACK, about 40 ms.
	conf := fmt.Sprintf("listener %d 127.0.0.1\nallow_anonymous true\nmax_inflight_messages %d\nmax_queued_messages 100000\nset_tcp_nodelay %v\n", m.port, o.MaxInflight, !o.Nagle)
	if o.Secure {
		// root: read the password and ACL files from the test's directory
		// without dropping privileges.
		conf = strings.Replace(conf, "allow_anonymous true\n", "allow_anonymous false\nuser root\n", 1) + o.Conf + "\n"
	}
	if o.Persistence {
		conf += fmt.Sprintf("persistence true\npersistence_location %s/\n", dir)
	} else {
		conf += "persistence false\n"
	}
	if err := os.WriteFile(m.conf, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	m.Start()
	t.Cleanup(m.Kill)
	return m
}

// Addr is host:port of the broker.
func (m *Mosquitto) Addr() string { return "127.0.0.1:" + strconv.Itoa(m.port) }

// URL is the broker's tcp:// URL.
func (m *Mosquitto) URL() string { return "tcp://" + m.Addr() }

// Start runs the process and waits until its port accepts connections; it
// retries while a killed predecessor still holds the port.
func (m *Mosquitto) Start() {
	m.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		cmd := exec.Command(m.bin, "-c", m.conf)
		cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
		if err := cmd.Start(); err != nil {
			m.t.Fatalf("start mosquitto: %v", err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		for time.Now().Before(deadline) {
			select {
			case <-exited:
			default:
				c, err := net.DialTimeout("tcp", m.Addr(), 100*time.Millisecond)
				if err != nil {
					time.Sleep(20 * time.Millisecond)
					continue
				}
				c.Close()
				m.mu.Lock()
				m.cmd, m.exited = cmd, exited
				m.mu.Unlock()
				return
			}
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	m.t.Fatalf("mosquitto did not come up on port %d", m.port)
}

// Kill stops the process with SIGKILL: a crash, not a clean shutdown.
func (m *Mosquitto) Kill() {
	m.mu.Lock()
	cmd, exited := m.cmd, m.exited
	m.cmd = nil
	m.mu.Unlock()
	if cmd == nil {
		return
	}
	if err := testproc.Kill(cmd, exited, 5*time.Second); err != nil {
		m.t.Errorf("mosquitto: %v", err)
	}
}

// Restart kills the broker and starts it again on the same port.
func (m *Mosquitto) Restart() {
	m.Kill()
	m.Start()
}

// Embedded runs the embedded mochi broker (anonymous access) on a free
// loopback port until the test ends and returns its URL and server.
func Embedded(t testing.TB) (string, *mochi.Server) {
	t.Helper()
	return EmbeddedWith(t, nil)
}

// EmbeddedWith is Embedded with hook deciding who may connect, publish and
// subscribe instead of the allow-all hook (mochi lets a client in if any
// hook allows it). A nil hook is the allow-all one.
func EmbeddedWith(t testing.TB, hook mochi.Hook) (string, *mochi.Server) {
	t.Helper()
	srv := mochi.New(&mochi.Options{Logger: slog.New(slog.DiscardHandler)})
	if hook == nil {
		hook = new(auth.AllowHook)
	}
	if err := srv.AddHook(hook, nil); err != nil {
		t.Fatal(err)
	}
	l := listeners.NewTCP(listeners.Config{ID: "test", Address: "127.0.0.1:0"})
	if err := srv.AddListener(l); err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve() }()
	t.Cleanup(func() { _ = srv.Close() })
	return "tcp://" + l.Address(), srv
}
