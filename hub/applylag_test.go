package hub

import (
	"sync"
	"testing"
	"time"

	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// Acks do not wait for the applier: while it is busy (here held inside a
// state request, as a checkpoint's encoding holds it), batches are still
// committed and acknowledged, beyond the few groups the apply queue used to
// hold; once it is free it applies them all, in order.
func TestAcksWhileApplierBusy(t *testing.T) {
	s, cc := startCountingHub(t, t.TempDir())
	waitReady(t, s)
	d := newDevice(t, "tcp://"+s.BrokerAddr(), "dev-busy")
	stream := wire.NewStreamID()

	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	// Registered after startHub's shutdown, so it runs first: a failed
	// test must not leave the applier held while the hub stops.
	t.Cleanup(free)
	done := make(chan error, 1)
	go func() {
		done <- s.inApplier(func() error {
			close(held)
			<-release
			return nil
		})
	}()
	<-held
	const batches, per = 40, 5
	for i := range batches {
		// One batch at a time, each acked before the next: one group each.
		if a := d.send(makeBatch("dev-busy", stream, uint64(1+i*per), per)); a.Status != wirepb.AckStatus_ACK_STATUS_OK {
			t.Fatalf("batch %d acked %v while the applier was busy", i, a.Status)
		}
	}
	cc.mu.Lock()
	applied := len(cc.Streams)
	cc.mu.Unlock()
	if applied != 0 {
		t.Fatalf("the consumer saw %d streams while the applier was held", applied)
	}
	free()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		cc.mu.Lock()
		defer cc.mu.Unlock()
		st := cc.Streams["dev-busy/"+stream.String()]
		return st != nil && st.Events == batches*per
	})
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if st := cc.Streams["dev-busy/"+stream.String()]; st.Twice != 0 || st.Batches != batches {
		t.Fatalf("applied %+v: want %d batches, none twice", st, batches)
	}
}

// The lag budget lets a group through when nothing is queued, whatever its
// size, and otherwise holds the committer until enough is released.
func TestLagBudget(t *testing.T) {
	var b lagBudget
	b.acquire(applyLagBytes + 1) // alone: passes
	got := make(chan struct{})
	go func() { b.acquire(1); close(got) }()
	select {
	case <-got:
		t.Fatal("acquired beyond the budget")
	case <-time.After(50 * time.Millisecond):
	}
	b.release(applyLagBytes + 1)
	<-got
	b.release(1)
	if b.used != 0 {
		t.Fatalf("budget used %d after every release", b.used)
	}
}
