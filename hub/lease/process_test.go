package lease_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"edgeflow/hub/lease"
	"edgeflow/hub/natslog"
)

// TestMain lets the test binary run as a hub process of its own (see
// runChild), so a test can SIGKILL or SIGSTOP a hub.
func TestMain(m *testing.M) {
	if os.Getenv("LEASE_TEST_CHILD") != "" {
		os.Exit(runChild())
	}
	os.Exit(m.Run())
}

// runChild is a hub process: it holds leases, claims each acquired
// partition's checkpoint, saves it every 50 ms while it believes it owns
// the partition, and prints every event on stdout. On "zombie" from stdin
// it saves every partition it ever held with the epoch it held it under,
// as a paused hub's in-flight write would.
func runChild() int {
	var outMu sync.Mutex
	say := func(format string, args ...any) {
		outMu.Lock()
		defer outMu.Unlock()
		fmt.Printf(format+"\n", args...)
	}
	url, id := os.Getenv("LEASE_TEST_URL"), os.Getenv("LEASE_TEST_HUB")
	parts, _ := strconv.Atoi(os.Getenv("LEASE_TEST_PARTS"))
	ctx := context.Background()
	nc, js, err := dial(url)
	if err != nil {
		say("error %v", err)
		return 1
	}
	defer nc.Close()
	pc, err := natslog.OpenPartitionCheckpoints(ctx, js, natslog.PartitionCheckpointOptions{Replicas: 1})
	if err != nil {
		say("error %v", err)
		return 1
	}
	var mu sync.Mutex
	owned, ever := map[int]uint64{}, map[int]uint64{}
	cb := lease.Callbacks{
		Acquired: func(p int, e uint64) {
			if err := pc.Claim(ctx, p, e); err != nil {
				say("claim-error %d %d %v", p, e, err)
				return
			}
			mu.Lock()
			owned[p], ever[p] = e, e
			mu.Unlock()
			say("acquired %d %d", p, e)
		},
		Lost: func(p int, e uint64, r lease.Reason) {
			mu.Lock()
			delete(owned, p)
			mu.Unlock()
			say("lost %d %d %s", p, e, strings.ReplaceAll(string(r), " ", "_"))
		},
		Handoff: func(p int, e uint64) {
			mu.Lock()
			delete(owned, p)
			mu.Unlock()
			_ = pc.Release(ctx, p, e)
			say("handoff %d %d", p, e)
		},
	}
	m, err := lease.Open(ctx, js, lease.Options{HubID: id, Partitions: parts, TTL: testTTL, Renew: testRenew, Replicas: 1,
		Callbacks: cb, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		say("error %v", err)
		return 1
	}
	go func() {
		for {
			time.Sleep(50 * time.Millisecond)
			mu.Lock()
			snap := make(map[int]uint64, len(owned))
			for p, e := range owned {
				snap[p] = e
			}
			mu.Unlock()
			for p, e := range snap {
				if err := pc.Save(ctx, p, e, []byte("state")); errors.Is(err, natslog.ErrFenced) {
					say("fenced %d %d", p, e)
				}
			}
		}
	}()
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			if sc.Text() != "zombie" {
				continue
			}
			mu.Lock()
			snap := make(map[int]uint64, len(ever))
			for p, e := range ever {
				snap[p] = e
			}
			mu.Unlock()
			for p, e := range snap {
				err := pc.Save(ctx, p, e, []byte("zombie"))
				switch {
				case errors.Is(err, natslog.ErrFenced):
					say("zombie %d %d fenced", p, e)
				case err == nil:
					say("zombie %d %d written", p, e)
				default:
					say("zombie %d %d error", p, e)
				}
			}
			say("zombie-done %d", pc.FencedWrites())
		}
	}()
	say("ready")
	err = m.Run(ctx)
	say("run-ended %v", err)
	return 0
}

// child is a hub process under test and what it printed.
type child struct {
	id    string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	exit  chan struct{}

	mu    sync.Mutex
	lines []string
	owned map[int]uint64
}

func startChild(t *testing.T, url, id string, parts int) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "LEASE_TEST_CHILD=1", "LEASE_TEST_URL="+url, "LEASE_TEST_HUB="+id, "LEASE_TEST_PARTS="+strconv.Itoa(parts))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{id: id, cmd: cmd, stdin: in, exit: make(chan struct{}), owned: map[int]uint64{}}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.line(sc.Text())
		}
		_ = cmd.Wait()
		close(c.exit)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		<-c.exit
	})
	waitFor(t, "hub process "+id+" to start", func() bool { return c.count("ready") > 0 || c.count("error") > 0 })
	if c.count("error") > 0 {
		t.Fatalf("hub process %s: %v", id, c.with("error"))
	}
	return c
}

func (c *child) line(s string) {
	f := strings.Fields(s)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lines = append(c.lines, s)
	if len(f) >= 3 {
		p, _ := strconv.Atoi(f[1])
		e, _ := strconv.ParseUint(f[2], 10, 64)
		switch f[0] {
		case "acquired":
			c.owned[p] = e
		case "lost", "handoff":
			delete(c.owned, p)
		}
	}
}

// with returns the printed lines starting with word.
func (c *child) with(word string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, l := range c.lines {
		if strings.HasPrefix(l, word+" ") || l == word {
			out = append(out, l)
		}
	}
	return out
}

func (c *child) count(word string) int { return len(c.with(word)) }

// ownedNow is what the process last said it owns.
func (c *child) ownedNow() map[int]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[int]uint64, len(c.owned))
	for p, e := range c.owned {
		out[p] = e
	}
	return out
}

// startClaimingHub is an in-process hub that claims every partition it
// acquires in the checkpoint bucket before recording the acquisition.
func startClaimingHub(t *testing.T, url, id string, parts int) (*hub, *natslog.PartitionCheckpoints) {
	_, js := connect(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	pc, err := natslog.OpenPartitionCheckpoints(ctx, js, natslog.PartitionCheckpointOptions{Replicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	h := startHub(t, url, id, parts, func(o *lease.Options) {
		rec := o.Callbacks.Acquired
		o.Callbacks.Acquired = func(p int, e uint64) {
			if err := pc.Claim(context.Background(), p, e); err != nil {
				t.Errorf("claim partition %d at epoch %d: %v", p, e, err)
			}
			rec(p, e)
		}
	})
	return h, pc
}

// splitAsAssigned reports whether the in-process hub a and the hub
// process k own exactly what Assign gives each of them.
func splitAsAssigned(a *hub, k *child, parts int) bool {
	want := lease.Assign([]string{a.id, k.id}, parts)
	kOwns := k.ownedNow()
	for p := range parts {
		_, aOwns := a.m.Owns(p)
		_, kOwnsP := kOwns[p]
		if aOwns != (want[p] == a.id) || kOwnsP != (want[p] == k.id) {
			return false
		}
	}
	return true
}

// TestKilledHubTakenOver: a hub process killed with SIGKILL has its
// partitions taken over once its leases expire; the time from the kill
// to each acquisition is logged (LEASE_KILLS sets how many kills, 1 by
// default).
func TestKilledHubTakenOver(t *testing.T) {
	const parts = 64
	kills := 1
	if n, err := strconv.Atoi(os.Getenv("LEASE_KILLS")); err == nil && n > 0 {
		kills = n
	}
	c := startNATS(t)
	a, _ := startClaimingHub(t, c.URLs(), "a", parts)
	var all []time.Duration
	var lastPer []time.Duration
	for i := range kills {
		k := startChild(t, c.URLs(), "k", parts)
		waitFor(t, "the hub process to own its share", func() bool { return splitAsAssigned(a, k, parts) })
		theirs := k.ownedNow()
		acquiredBefore := len(a.eventsOf("acquired"))
		if err := k.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		killed := time.Now()
		<-k.exit
		waitFor(t, "a to take every partition", func() bool { return len(a.owned(parts)) == parts })
		var times []time.Duration
		for _, e := range a.eventsOf("acquired")[acquiredBefore:] {
			if old, ok := theirs[e.p]; ok {
				if e.epoch <= old {
					t.Errorf("partition %d taken at epoch %d, not above the dead hub's %d", e.p, e.epoch, old)
				}
				times = append(times, e.at.Sub(killed))
			}
		}
		slices.Sort(times)
		if len(times) != len(theirs) {
			k.mu.Lock()
			t.Fatalf("kill %d: %d acquisitions for %d partitions; a's events %+v; process said %q", i, len(times), len(theirs), a.eventsOf("acquired")[acquiredBefore:], k.lines)
		}
		all = append(all, times...)
		lastPer = append(lastPer, times[len(times)-1])
		t.Logf("kill %d: %d partitions taken over; from SIGKILL: first %v, median %v, last %v (TTL %v)", i+1, len(times),
			times[0].Round(time.Millisecond), times[len(times)/2].Round(time.Millisecond), times[len(times)-1].Round(time.Millisecond), testTTL)
	}
	slices.Sort(all)
	slices.Sort(lastPer)
	t.Logf("takeover over %d kills (%d partitions): per partition p50 %v max %v; per kill (last partition) p50 %v max %v",
		kills, len(all), all[len(all)/2].Round(time.Millisecond), all[len(all)-1].Round(time.Millisecond),
		lastPer[len(lastPer)/2].Round(time.Millisecond), lastPer[len(lastPer)-1].Round(time.Millisecond))
	if a.metric(t, "edgeflow_hub_partition_takeover_seconds") == 0 {
		t.Error("partition_takeover_seconds observed nothing")
	}
}

// TestPausedHubFenced: a hub process stopped with SIGSTOP past its TTL is
// taken over; on SIGCONT it reports every partition Lost, its checkpoint
// writes under the old epochs are refused with ErrFenced and counted, and
// it rejoins.
func TestPausedHubFenced(t *testing.T) {
	const parts = 64
	c := startNATS(t)
	a, pc := startClaimingHub(t, c.URLs(), "a", parts)
	z := startChild(t, c.URLs(), "z", parts)
	waitFor(t, "the hub process to own its share", func() bool { return splitAsAssigned(a, z, parts) })
	theirs := z.ownedNow()
	if err := z.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	waitFor(t, "a to take every partition", func() bool { return len(a.owned(parts)) == parts })
	t.Logf("a owns every partition %v after SIGSTOP", time.Since(stopped).Round(time.Millisecond))
	if err := z.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the resumed process to report its partitions lost", func() bool { return z.count("lost") >= len(theirs) })
	for _, l := range z.with("lost") {
		if !strings.Contains(l, strings.ReplaceAll(string(lease.ReasonExpired), " ", "_")) && !strings.Contains(l, strings.ReplaceAll(string(lease.ReasonTaken), " ", "_")) {
			t.Errorf("unexpected loss: %s", l)
		}
	}
	if _, err := io.WriteString(z.stdin, "zombie\n"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the zombie writes", func() bool { return z.count("zombie-done") > 0 })
	zs := z.with("zombie")
	if len(zs) != len(theirs) {
		t.Fatalf("%d zombie writes for %d partitions: %v", len(zs), len(theirs), zs)
	}
	for _, l := range zs {
		if !strings.HasSuffix(l, " fenced") {
			t.Errorf("zombie write not refused: %s", l)
		}
	}
	t.Logf("zombie: %d writes refused; %d refused by the process's own saver before it saw the loss; process counted %s",
		len(zs), z.count("fenced"), strings.TrimPrefix(z.with("zombie-done")[0], "zombie-done "))
	waitFor(t, "the resumed process to rejoin", func() bool { return splitAsAssigned(a, z, parts) })
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	for p := range parts {
		cp, err := pc.Load(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if string(cp.Data) == "zombie" {
			t.Errorf("partition %d holds a zombie's write", p)
		}
	}
}
