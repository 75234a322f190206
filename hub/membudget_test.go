package hub

import (
	"testing"
	"time"

	"edgeflow/aggregate"
	"edgeflow/hub/membudget"
	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// TestMemoryBudgetSizesHub starts a hub with the sizes of a small budget
// and checks that its Badger store, lag budget, queues and engine use them,
// that an explicit option keeps its value, and that batches still flow.
func TestMemoryBudgetSizesHub(t *testing.T) {
	z, err := membudget.Derive(membudget.SmallLimit)
	if err != nil {
		t.Fatal(err)
	}
	o := testOptions(t, t.TempDir())
	o.Memory = z
	o.MaxGroupBytes = 3 << 20 // explicit: wins
	o.Aggregate = &aggregate.Options{}
	s := startHub(t, o)
	waitReady(t, s)
	bo := s.st.DB.Opts()
	if bo.MemTableSize != z.BadgerMemTable || bo.NumMemtables != z.BadgerMemTables || bo.BlockCacheSize != z.BadgerBlockCache ||
		bo.IndexCacheSize != z.BadgerIndexCache || bo.ValueLogFileSize != z.BadgerValueLogFile {
		t.Errorf("Badger options %+v, want the sizes of %+v", bo, z)
	}
	if s.com.lag.limit != z.ApplyLag || s.opts.QueueLen != z.QueueLen || cap(s.com.in) != z.QueueLen ||
		s.opts.MQTTClientQueue != z.ClientQueue || s.opts.MaxGroupBytes != 3<<20 || s.opts.MaxGroupBatches != z.MaxGroupBatches {
		t.Errorf("lag %d, queue %d (chan %d), client queue %d, group bytes %d; want %+v and group bytes 3MiB",
			s.com.lag.limit, s.opts.QueueLen, cap(s.com.in), s.opts.MQTTClientQueue, s.opts.MaxGroupBytes, z)
	}
	if a := s.opts.Aggregate; a.MaxLivePartials != z.MaxLivePartials || a.QueryCachePartials != z.QueryCachePartials ||
		a.MaxPending != z.MaxPending || a.StreamBuffer != z.StreamBuffer || a.EvictAfter != 0 {
		t.Errorf("engine options %+v, want the caps of %+v", a, z)
	}
	if o.Aggregate.MaxLivePartials != 0 {
		t.Error("the caller's aggregate options were changed")
	}
	d := newDevice(t, "tcp://"+s.BrokerAddr(), "dev-small")
	stream := wire.NewStreamID()
	for i := range 20 {
		if a := d.send(makeBatch("dev-small", stream, uint64(1+i*50), 50)); a.Status != wirepb.AckStatus_ACK_STATUS_OK {
			t.Fatalf("batch %d acked %v", i, a.Status)
		}
	}
}

// TestLagBudgetLimit checks that a lag budget with a limit holds the
// committer at that limit rather than at applyLagBytes.
func TestLagBudgetLimit(t *testing.T) {
	b := lagBudget{limit: 1000}
	b.acquire(600)
	got := make(chan struct{})
	go func() { b.acquire(600); close(got) }()
	select {
	case <-got:
		t.Fatal("acquired beyond the limit")
	case <-time.After(50 * time.Millisecond):
	}
	b.release(600)
	<-got
	b.acquire(400) // 600 + 400 fits
	b.release(1000)
}
