package clusterview_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"edgeflow/hub/api"
	"edgeflow/hub/clusterview"
	"edgeflow/hub/lease"
	"edgeflow/hub/natslog"
	"edgeflow/internal/testnats"
)

const within = 30 * time.Second

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func connect(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url)
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

// startManager opens and runs a lease manager advertising url.
func startManager(t *testing.T, natsURL, id, url string, parts int) *lease.Manager {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	m, err := lease.Open(ctx, connect(t, natsURL), lease.Options{HubID: id, URL: url, Partitions: parts,
		TTL: 2 * time.Second, Renew: 300 * time.Millisecond, Replicas: 1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithCancel(context.Background())
	go func() { _ = m.Run(rctx) }()
	t.Cleanup(func() {
		sctx, c := context.WithTimeout(context.Background(), 5*time.Second)
		defer c()
		_ = m.Stop(sctx)
		rcancel()
	})
	return m
}

// ownedBy is what m owns now, by Owns.
func ownedBy(m *lease.Manager) map[int]uint64 {
	out := map[int]uint64{}
	for p := range m.Partitions() {
		if e, ok := m.Owns(p); ok {
			out[p] = e
		}
	}
	return out
}

// TestViewFromLeases: two hubs' views agree with the managers' Owns and
// with each other (members, URLs, partitions at epochs); PartitionOf is
// the partition the stream stores a device's messages in; Status reports
// owner, epoch, expiry and the stream's last sequence of every partition,
// and the applied position and lag of this hub's own partitions only.
func TestViewFromLeases(t *testing.T) {
	const parts = 4
	c := testnats.Start(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	l, err := natslog.EnsureStream(ctx, connect(t, c.URLs()), natslog.Options{Partitions: parts, Replicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	urls := map[string]string{"a": "http://hub-a.test:8080", "b": "https://hub-b.test:8443/edge"}
	ms := map[string]*lease.Manager{}
	views := map[string]*clusterview.View{}
	for _, id := range []string{"a", "b"} {
		ms[id] = startManager(t, c.URLs(), id, urls[id]+"/", parts)
		m := ms[id]
		v, err := clusterview.New(m, clusterview.Options{StreamLast: l.PartitionLastSeq, StreamLastMaxAge: time.Nanosecond,
			Applied: func() map[int]uint64 {
				// What the hub would say: here one behind the stream in
				// odd partitions, for every partition it owns.
				out := map[int]uint64{}
				for p := range ownedBy(m) {
					last, _ := l.PartitionLastSeq(context.Background(), p)
					out[p] = last - min(last, uint64(p%2))
				}
				return out
			}})
		if err != nil {
			t.Fatal(err)
		}
		views[id] = v
	}
	// Devices' messages land in the partition PartitionOf names.
	for i := range 40 {
		dev := fmt.Sprintf("dev.%d-x", i)
		seq, err := l.Publish(ctx, dev, []byte("x"))
		if err != nil {
			t.Fatal(err)
		}
		p := views["a"].PartitionOf(dev)
		if last, err := l.PartitionLastSeq(ctx, p); err != nil || last != seq {
			t.Fatalf("device %s: view says partition %d, whose last sequence is %d (%v), not the message's %d", dev, p, last, err, seq)
		}
	}
	want := func() []api.Member {
		var out []api.Member
		for _, id := range []string{"a", "b"} {
			out = append(out, api.Member{ID: id, BaseURL: urls[id], Owned: ownedBy(ms[id])})
		}
		return out
	}
	same := func(got, want []api.Member) bool {
		return slices.EqualFunc(got, want, func(a, b api.Member) bool {
			return a.ID == b.ID && a.BaseURL == b.BaseURL && maps.Equal(a.Owned, b.Owned)
		})
	}
	waitFor(t, "both views to hold both hubs' leases, every partition owned once", func() bool {
		w := want()
		if len(w[0].Owned)+len(w[1].Owned) != parts || len(w[0].Owned) == 0 || len(w[1].Owned) == 0 {
			return false
		}
		return same(views["a"].Members(), w) && same(views["b"].Members(), w)
	})
	for id, v := range views {
		if v.Self() != id || v.Partitions() != parts {
			t.Fatalf("view of %s: self %q partitions %d", id, v.Self(), v.Partitions())
		}
		st := v.Status()
		if st.Self != id || st.Partitions != parts || len(st.Hubs) != 2 || len(st.PartitionStates) != parts {
			t.Fatalf("status of %s: %+v", id, st)
		}
		for i, h := range st.Hubs {
			w := want()[i]
			if h.ID != w.ID || h.BaseURL != w.BaseURL || !slices.Equal(h.Owned, slices.Sorted(maps.Keys(w.Owned))) {
				t.Fatalf("status of %s: hub %+v, want %+v", id, h, w)
			}
		}
		for p, ps := range st.PartitionStates {
			last, err := l.PartitionLastSeq(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			owner := "a"
			if _, ok := ms["b"].Owns(p); ok {
				owner = "b"
			}
			epoch, _ := ms[owner].Owns(p)
			if ps.Partition != p || ps.Owner != owner || ps.Epoch != epoch || ps.StreamLast == nil || *ps.StreamLast != last {
				t.Fatalf("status of %s, partition %d: %+v; want owner %s epoch %d stream_last %d", id, p, ps, owner, epoch, last)
			}
			if owner != id && ps.LeaseExpiry.IsZero() {
				t.Fatalf("status of %s, partition %d: no lease expiry", id, p)
			}
			switch {
			case owner != id && (ps.Applied != nil || ps.Lag != nil):
				t.Fatalf("status of %s, partition %d of %s: applied and lag reported for another hub's partition", id, p, owner)
			case owner == id && (ps.Applied == nil || ps.Lag == nil || *ps.Lag != min(last, uint64(p%2)) || *ps.Applied+*ps.Lag != last):
				t.Fatalf("status of %s, own partition %d: %+v (stream last %d)", id, p, ps, last)
			}
		}
	}
	if _, err := clusterview.New(nil, clusterview.Options{}); err == nil {
		t.Error("New without a manager: no error")
	}
}
