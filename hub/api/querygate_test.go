package api

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestQueryGateWaits: a query that finds the slots taken gets one freed
// within its wait, and a client that goes away while waiting gives up
// its place.
func TestQueryGateWaits(t *testing.T) {
	o := Config{MaxQueries: 1, QueryWait: time.Minute, QueryTimeout: time.Minute}
	g, err := newQueryGate(o, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if !g.acquire(context.Background()) {
		t.Fatal("first acquire")
	}
	got := make(chan bool)
	go func() { got <- g.acquire(context.Background()) }()
	g.release()
	if !<-got {
		t.Fatal("a waiting query did not get the freed slot")
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { got <- g.acquire(ctx) }()
	cancel()
	if <-got {
		t.Fatal("a cancelled wait got a slot")
	}
	if g.retryAfter() != "60" {
		t.Fatalf("Retry-After %q", g.retryAfter())
	}
}
