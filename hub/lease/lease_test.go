package lease_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"edgeflow/hub/lease"
	"edgeflow/internal/testnats"
)

// TestAcquireRenewExpire: one hub takes every partition and keeps its
// epochs across many renewals; cut off from NATS it reports every
// partition Lost (not renewed) before the server lets another hub take
// them, and the next hub's epochs are newer.
func TestAcquireRenewExpire(t *testing.T) {
	const parts = 8
	c := startNATS(t)
	a := startHub(t, c.URLs(), "a", parts, nil)
	iv := checkInvariant(t, parts, a)
	waitFor(t, "hub a to own every partition", func() bool { return len(a.owned(parts)) == parts })
	epochs := map[int]uint64{}
	for p := range parts {
		epochs[p], _ = a.m.Owns(p)
	}
	time.Sleep(4 * testRenew)
	for p := range parts {
		if e, ok := a.m.Owns(p); !ok || e != epochs[p] {
			t.Fatalf("partition %d after renewals: epoch %d owned %v, want epoch %d", p, e, ok, epochs[p])
		}
	}
	if got := a.metric(t, "edgeflow_hub_partitions_owned"); got != parts {
		t.Errorf("partitions_owned = %v, want %d", got, parts)
	}
	st := a.m.Status()
	for _, ps := range st.Partitions {
		if ps.Owner != "a" || !ps.Mine || ps.Epoch != epochs[ps.Partition] || ps.Expires.IsZero() {
			t.Errorf("Status partition %d: %+v", ps.Partition, ps)
		}
	}

	cut := time.Now()
	a.nc.Close()
	waitFor(t, "hub a to report every partition lost", func() bool { return len(a.eventsOf("lost")) == parts })
	for _, e := range a.eventsOf("lost") {
		if e.reason != lease.ReasonExpired {
			t.Errorf("partition %d lost for %q, want %q", e.p, e.reason, lease.ReasonExpired)
		}
	}
	t.Logf("cut off: every partition lost after %v (TTL %v)", time.Since(cut).Round(time.Millisecond), testTTL)
	if got := a.metric(t, "edgeflow_hub_lease_renew_failures_total"); got == 0 {
		t.Error("lease_renew_failures_total stayed 0 while NATS was unreachable")
	}

	b := startHub(t, c.URLs(), "b", parts, nil)
	iv.set(a, b)
	waitFor(t, "hub b to take every partition", func() bool { return len(b.owned(parts)) == parts })
	for p := range parts {
		if e, _ := b.m.Owns(p); e <= epochs[p] {
			t.Errorf("partition %d: b's epoch %d not above a's %d", p, e, epochs[p])
		}
	}
}

// TestSplitJoinStop: two hubs split 64 partitions as Assign says; a third
// joins and gets its share by clean releases; the third stops cleanly and
// hands its partitions back, all without two owners at once.
func TestSplitJoinStop(t *testing.T) {
	const parts = 64
	c := startNATS(t)
	a := startHub(t, c.URLs(), "a", parts, nil)
	b := startHub(t, c.URLs(), "b", parts, nil)
	iv := checkInvariant(t, parts, a, b)
	waitFor(t, "a and b to split the partitions", func() bool {
		return settled([]*hub{a, b}, parts, lease.Assign([]string{"a", "b"}, parts))
	})
	t.Logf("a owns %d, b owns %d", len(a.owned(parts)), len(b.owned(parts)))

	released := a.metric(t, "edgeflow_hub_partition_rebalances_total") + b.metric(t, "edgeflow_hub_partition_rebalances_total")
	handoffs := len(a.eventsOf("handoff")) + len(b.eventsOf("handoff"))
	start := time.Now()
	cc := startHub(t, c.URLs(), "c", parts, nil)
	iv.set(a, b, cc)
	want3 := lease.Assign([]string{"a", "b", "c"}, parts)
	waitFor(t, "a, b and c to balance", func() bool { return settled([]*hub{a, b, cc}, parts, want3) })
	t.Logf("rebalance after c joined: %v; a %d, b %d, c %d", time.Since(start).Round(time.Millisecond),
		len(a.owned(parts)), len(b.owned(parts)), len(cc.owned(parts)))
	moved := a.metric(t, "edgeflow_hub_partition_rebalances_total") + b.metric(t, "edgeflow_hub_partition_rebalances_total") - released
	want2 := lease.Assign([]string{"a", "b"}, parts)
	changed := 0
	for p := range want2 {
		if want2[p] != want3[p] {
			changed++
		}
	}
	if moved != float64(changed) {
		t.Errorf("a and b released %v partitions, the assignment moved %d", moved, changed)
	}
	if n := len(a.eventsOf("handoff")) + len(b.eventsOf("handoff")) - handoffs; float64(n) != moved {
		t.Errorf("%d Handoff calls for %v releases", n, moved)
	}
	if n := len(a.eventsOf("lost")) + len(b.eventsOf("lost")); n != 0 {
		t.Errorf("%d partitions Lost during a clean rebalance", n)
	}

	mine := cc.owned(parts)
	start = time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	if err := cc.m.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if got := len(cc.eventsOf("handoff")); got != len(mine) {
		t.Errorf("c handed off %d partitions, owned %d", got, len(mine))
	}
	waitFor(t, "a and b to take c's partitions", func() bool {
		return settled([]*hub{a, b}, parts, lease.Assign([]string{"a", "b"}, parts))
	})
	t.Logf("handover after c stopped: %v", time.Since(start).Round(time.Millisecond))
	if a.metric(t, "edgeflow_hub_partition_takeover_seconds")+b.metric(t, "edgeflow_hub_partition_takeover_seconds") == 0 {
		t.Error("no takeover observed in partition_takeover_seconds")
	}
}

// TestDuplicateHubID: a second hub with a live hub's id is refused.
func TestDuplicateHubID(t *testing.T) {
	c := startNATS(t)
	startHub(t, c.URLs(), "same", 4, nil)
	_, js := connect(t, c.URLs())
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	_, err := lease.Open(ctx, js, lease.Options{HubID: "same", Partitions: 4, TTL: testTTL, Renew: testRenew, Replicas: 1})
	if !errors.Is(err, lease.ErrDuplicateHub) {
		t.Fatalf("Open with a live hub's id: %v, want ErrDuplicateHub", err)
	}
	t.Logf("refused: %v", err)
}

// TestRestartSameID: a hub id whose previous run died (its heartbeat no
// longer renewed) starts again without waiting for the leases' TTL.
func TestRestartSameID(t *testing.T) {
	const parts = 4
	c := startNATS(t)
	a := startHub(t, c.URLs(), "a", parts, nil)
	waitFor(t, "a to own every partition", func() bool { return len(a.owned(parts)) == parts })
	a.cancel() // dies without handing over: leases left in the bucket
	<-a.done
	a2 := startHub(t, c.URLs(), "a", parts, nil)
	waitFor(t, "the new run of a to own every partition", func() bool { return len(a2.owned(parts)) == parts })
}

// TestBadOptions: each invalid field is named.
func TestBadOptions(t *testing.T) {
	for name, o := range map[string]lease.Options{
		"HubID":      {HubID: "a.b", Partitions: 4},
		"Partitions": {HubID: "a", Partitions: 0},
		"TTL":        {HubID: "a", Partitions: 4, TTL: time.Millisecond},
		"Renew":      {HubID: "a", Partitions: 4, TTL: 4 * time.Second, Renew: 2 * time.Second},
	} {
		o.EnsureDefaults()
		err := o.Validate()
		if !errors.Is(err, lease.ErrInvalidOption) || !contains(err.Error(), name) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// jumpClock is the real clock moved by an offset the test sets.
type jumpClock struct{ off atomic.Int64 }

func (c *jumpClock) Now() time.Time       { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *jumpClock) jump(d time.Duration) { c.off.Add(int64(d)) }

// TestClockJump: a hub whose clock jumps back an hour while it cannot
// renew must not keep believing it owns its partitions (the next hub
// takes them once the server expires them); a jump forward only ends
// ownership early.
func TestClockJump(t *testing.T) {
	const parts = 16
	c := startNATS(t)
	clk := &jumpClock{}
	a := startHub(t, c.URLs(), "a", parts, func(o *lease.Options) { o.Clock = clk })
	b := startHub(t, c.URLs(), "b", parts, nil)
	iv := checkInvariant(t, parts, a, b)
	waitFor(t, "a and b to split", func() bool { return settled([]*hub{a, b}, parts, nil) })

	clk.jump(time.Hour)
	waitFor(t, "a to lose its partitions after the forward jump and take them again", func() bool {
		return len(a.eventsOf("lost")) > 0 && settled([]*hub{a, b}, parts, nil)
	})

	lostBefore := len(a.eventsOf("lost"))
	held := len(a.owned(parts))
	a.nc.Close()
	clk.jump(-2 * time.Hour)
	if got := a.owned(parts); len(got) != 0 {
		t.Fatalf("after the backward jump a still owns %v", got)
	}
	waitFor(t, "b to own every partition", func() bool { return len(b.owned(parts)) == parts })
	lost := a.eventsOf("lost")[lostBefore:]
	if len(lost) != held {
		t.Errorf("a reported %d partitions lost, held %d", len(lost), held)
	}
	for _, e := range lost {
		if e.reason != lease.ReasonClock {
			t.Errorf("partition %d lost for %q, want %q", e.p, e.reason, lease.ReasonClock)
		}
	}
	_ = iv
}

// TestNATSDownSafePause: with the only NATS server killed, every hub
// gives up every partition (no renewals) and takes them again once the
// server is back.
func TestNATSDownSafePause(t *testing.T) {
	const parts = 16
	c := startNATS(t)
	a := startHub(t, c.URLs(), "a", parts, nil)
	b := startHub(t, c.URLs(), "b", parts, nil)
	checkInvariant(t, parts, a, b)
	waitFor(t, "a and b to split", func() bool { return settled([]*hub{a, b}, parts, nil) })
	c.Kill(0)
	down := time.Now()
	waitFor(t, "both hubs to pause", func() bool { return len(a.owned(parts))+len(b.owned(parts)) == 0 })
	t.Logf("paused %v after the server died (TTL %v)", time.Since(down).Round(time.Millisecond), testTTL)
	for _, h := range []*hub{a, b} {
		for _, e := range h.eventsOf("lost") {
			if e.reason != lease.ReasonExpired {
				t.Errorf("%s lost partition %d for %q", h.id, e.p, e.reason)
			}
		}
	}
	time.Sleep(testTTL)
	c.Restart(0)
	up := time.Now()
	waitFor(t, "every partition owned again", func() bool { return settled([]*hub{a, b}, parts, nil) })
	t.Logf("recovered %v after the server restarted", time.Since(up).Round(time.Millisecond))
	if a.metric(t, "edgeflow_hub_lease_kv_errors_total")+b.metric(t, "edgeflow_hub_lease_kv_errors_total") == 0 {
		t.Error("lease_kv_errors_total stayed 0 while the server was down")
	}
}

// TestGarbageInBucket: a value that does not decode is counted and
// ignored; the partition it blocks is taken once the server expires it.
func TestGarbageInBucket(t *testing.T) {
	const parts = 4
	c := startNATS(t)
	a := startHub(t, c.URLs(), "a", parts, nil)
	waitFor(t, "a to own every partition", func() bool { return len(a.owned(parts)) == parts })
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	_, js := connect(t, c.URLs())
	kv, err := js.KeyValue(ctx, lease.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "lease.2", []byte("\xff not json")); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "hub.bogus", make([]byte, 4096)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a to count the bad values", func() bool { return a.metric(t, "edgeflow_hub_lease_kv_errors_total") >= 2 })
	waitFor(t, "a to lose partition 2 (its lease was overwritten)", func() bool { return len(a.eventsOf("lost")) == 1 })
	if e := a.eventsOf("lost")[0]; e.p != 2 || e.reason != lease.ReasonTaken {
		t.Fatalf("lost %+v, want partition 2 %q", e, lease.ReasonTaken)
	}
	waitFor(t, "a to own partition 2 again after the bad value expired", func() bool { return len(a.owned(parts)) == parts })
	if got := a.m.Status().Members; !slices.Equal(got, []string{"a"}) {
		t.Errorf("members %v, want [a]", got)
	}
}

// TestThreeNodeNodeKilled: on a three-node NATS cluster with the bucket
// on three replicas, killing a node (the hubs' connections fail over)
// never gives two owners, and every partition is owned again after.
func TestThreeNodeNodeKilled(t *testing.T) {
	const parts = 16
	c := testnats.Start(t, 3)
	r3 := func(o *lease.Options) { o.Replicas = 3 }
	a := startHub(t, c.URLs(), "a", parts, r3)
	b := startHub(t, c.URLs(), "b", parts, r3)
	checkInvariant(t, parts, a, b)
	waitFor(t, "a and b to split", func() bool { return settled([]*hub{a, b}, parts, nil) })
	lostBefore := len(a.eventsOf("lost")) + len(b.eventsOf("lost"))
	c.Kill(0)
	killed := time.Now()
	time.Sleep(2 * testTTL)
	waitFor(t, "every partition owned after the node died", func() bool { return settled([]*hub{a, b}, parts, nil) })
	var lastLost, lastAcquired time.Time
	var lastReason lease.Reason
	for _, h := range []*hub{a, b} {
		for _, e := range h.eventsOf("lost") {
			if e.at.After(lastLost) {
				lastLost, lastReason = e.at, e.reason
			}
		}
		for _, e := range h.eventsOf("acquired") {
			if e.at.After(lastAcquired) {
				lastAcquired = e.at
			}
		}
	}
	if n := len(a.eventsOf("lost")) + len(b.eventsOf("lost")) - lostBefore; n > 0 {
		t.Logf("node killed: %d partitions lost (the last %v after the kill, reason %q), all owned again %v after the kill",
			n, lastLost.Sub(killed).Round(time.Millisecond), lastReason, lastAcquired.Sub(killed).Round(time.Millisecond))
	} else {
		t.Log("node killed: no partition lost")
	}
	c.Restart(0)
	waitFor(t, "every partition owned after the node came back", func() bool { return settled([]*hub{a, b}, parts, nil) })
}
