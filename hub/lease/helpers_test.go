package lease_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"edgeflow/hub/lease"
	"edgeflow/internal/testnats"
)

// within bounds every wait; a failure says what it waited for.
const within = 60 * time.Second

// Short leases keep the tests quick: TTL 2s and Renew 300 ms unless
// LEASE_TEST_TTL (a duration) sets the TTL, with Renew at 3/20 of it.
var testTTL, testRenew = func() (time.Duration, time.Duration) {
	ttl := 2 * time.Second
	if d, err := time.ParseDuration(os.Getenv("LEASE_TEST_TTL")); err == nil && d >= time.Second {
		ttl = d
	}
	return ttl, ttl * 3 / 20
}()

func connect(t testing.TB, urls string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(urls, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatalf("connect %s: %v", urls, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// event is one callback call.
type event struct {
	kind   string // acquired, lost, handoff
	p      int
	epoch  uint64
	reason lease.Reason
	at     time.Time
}

// hub is a Manager under test with its callbacks recorded.
type hub struct {
	id  string
	m   *lease.Manager
	nc  *nats.Conn
	reg *prometheus.Registry

	mu     sync.Mutex
	events []event
	cancel context.CancelFunc
	done   chan error
}

func (h *hub) record(e event) {
	e.at = time.Now()
	h.mu.Lock()
	h.events = append(h.events, e)
	h.mu.Unlock()
}

// eventsOf returns the recorded events of kind.
func (h *hub) eventsOf(kind string) []event {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []event
	for _, e := range h.events {
		if e.kind == kind {
			out = append(out, e)
		}
	}
	return out
}

// owned is the partitions the hub owns now.
func (h *hub) owned(parts int) []int {
	var out []int
	for p := range parts {
		if _, ok := h.m.Owns(p); ok {
			out = append(out, p)
		}
	}
	return out
}

// metric returns a counter, gauge or histogram count of the hub's registry.
func (h *hub) metric(t testing.TB, name string) float64 {
	t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		m := mf.GetMetric()[0]
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue()
		case m.Gauge != nil:
			return m.GetGauge().GetValue()
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount())
		}
	}
	t.Fatalf("metric %s not registered", name)
	return 0
}

// startHub opens and runs a manager over its own connection to urls.
func startHub(t testing.TB, urls, id string, parts int, tweak func(*lease.Options)) *hub {
	t.Helper()
	nc, js := connect(t, urls)
	h := &hub{id: id, nc: nc, reg: prometheus.NewRegistry(), done: make(chan error, 1)}
	o := lease.Options{
		HubID: id, Partitions: parts, TTL: testTTL, Renew: testRenew, Replicas: 1,
		Registerer: h.reg,
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		Callbacks: lease.Callbacks{
			Acquired: func(p int, e uint64) { h.record(event{kind: "acquired", p: p, epoch: e}) },
			Lost:     func(p int, e uint64, r lease.Reason) { h.record(event{kind: "lost", p: p, epoch: e, reason: r}) },
			Handoff:  func(p int, e uint64) { h.record(event{kind: "handoff", p: p, epoch: e}) },
		},
	}
	if tweak != nil {
		tweak(&o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	m, err := lease.Open(ctx, js, o)
	if err != nil {
		t.Fatalf("Open %s: %v", id, err)
	}
	h.m = m
	rctx, rcancel := context.WithCancel(context.Background())
	h.cancel = rcancel
	go func() { h.done <- m.Run(rctx) }()
	t.Cleanup(func() {
		rcancel()
		sctx, c := context.WithTimeout(context.Background(), 5*time.Second)
		defer c()
		_ = m.Stop(sctx)
	})
	return h
}

// waitFor polls cond until it holds, failing the test with what after
// within.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ownership maps each partition to the hubs that own it now.
func ownership(hubs []*hub, parts int) [][]string {
	out := make([][]string, parts)
	for _, h := range hubs {
		for _, p := range h.owned(parts) {
			out[p] = append(out[p], h.id)
		}
	}
	return out
}

// settled reports whether every partition has exactly the owner want
// gives it (want nil: exactly one owner, whoever).
func settled(hubs []*hub, parts int, want []string) bool {
	for p, o := range ownership(hubs, parts) {
		if len(o) != 1 || want != nil && o[0] != want[p] {
			return false
		}
	}
	return true
}

// invariant samples every hub's Owns and fails the test if two hubs
// believe they own one partition for longer than margin (sampling the
// hubs one after another can see a clean handover's two sides within a
// sample).
type invariant struct {
	hubs   atomic.Pointer[[]*hub]
	parts  int
	margin time.Duration
	stop   chan struct{}
	done   chan struct{}

	mu         sync.Mutex
	violations []string
	samples    int
}

func checkInvariant(t testing.TB, parts int, hubs ...*hub) *invariant {
	iv := &invariant{parts: parts, margin: testRenew, stop: make(chan struct{}), done: make(chan struct{})}
	iv.set(hubs...)
	go iv.run()
	t.Cleanup(func() {
		iv.halt()
		iv.mu.Lock()
		defer iv.mu.Unlock()
		if len(iv.violations) > 0 {
			t.Errorf("two owners at once (%d of %d samples): %v", len(iv.violations), iv.samples, iv.violations[:min(5, len(iv.violations))])
		} else {
			t.Logf("invariant: %d samples, never two owners beyond %v", iv.samples, iv.margin)
		}
	})
	return iv
}

func (iv *invariant) set(hubs ...*hub) {
	hs := slices.Clone(hubs)
	iv.hubs.Store(&hs)
}

func (iv *invariant) halt() {
	select {
	case <-iv.stop:
	default:
		close(iv.stop)
	}
	<-iv.done
}

func (iv *invariant) run() {
	defer close(iv.done)
	since := map[int]time.Time{}
	for {
		select {
		case <-iv.stop:
			return
		case <-time.After(5 * time.Millisecond):
		}
		now := time.Now()
		own := ownership(*iv.hubs.Load(), iv.parts)
		iv.mu.Lock()
		iv.samples++
		for p, o := range own {
			if len(o) < 2 {
				delete(since, p)
				continue
			}
			s, ok := since[p]
			if !ok {
				since[p] = now
				continue
			}
			if now.Sub(s) > iv.margin {
				iv.violations = append(iv.violations, fmt.Sprintf("partition %d owned by %v for %v", p, o, now.Sub(s)))
			}
		}
		iv.mu.Unlock()
	}
}

// startNATS runs one nats-server.
func startNATS(t testing.TB) *testnats.Cluster { return testnats.Start(t, 1) }

// dial connects without a testing.TB, for the hub processes.
func dial(url string) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}
