package aggregate

import (
	"math/rand/v2"
	"sync"
	"testing"
)

// TestConcurrentQueries runs queries, stream reads, stats and snapshots
// while batches are applied (meaningful under -race).
func TestConcurrentQueries(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	batches := deliver(r, genFleet(r))
	opt := propOptions()
	opt.EvictAfter = 1
	e := newEngine(t, opt)
	sub := e.Subscribe(16)
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			for _, q := range allQueries()[:4] {
				if _, err := e.Query(q); err != nil {
					t.Error(err)
				}
			}
			_, _, _ = e.ReadStream(0, 100)
			_ = e.Stats()
			if _, err := e.Snapshot(); err != nil {
				t.Error(err)
			}
		}
	}()
	for _, b := range batches {
		if err := e.Apply(b); err != nil {
			t.Fatal(err)
		}
	}
	e.Tick()
	close(done)
	wg.Wait()
	sub.Close()
}
