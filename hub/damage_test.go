package hub

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"edgeflow/hub/hublog"
	badger "github.com/dgraph-io/badger/v4"
)

// TestRetentionKeepsPreviousCheckpointLog: retention deletes only the log
// entries both retained checkpoints cover, so when the newest checkpoint
// is damaged the hub recovers the same state from the one before it plus
// the log after it.
func TestRetentionKeepsPreviousCheckpointLog(t *testing.T) {
	clock := &fakeNow{t: time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)}
	o := testOptions(t, t.TempDir())
	o.Now, o.RetentionMaxAge = clock.now, time.Hour
	o.Consumers = []Consumer{newCountingConsumer()}
	s := startHub(t, o)
	d := newDevice(t, "tcp://"+s.BrokerAddr(), "d1")
	feed(t, s, []*device{d}, 1, 300)
	if err := s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	older := s.lastCkpt.Pos
	clock.add(2 * time.Hour)
	feed(t, s, []*device{d}, 301, 600)
	if err := s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	clock.add(2 * time.Hour)
	if n, err := s.Retain(); err != nil || n == 0 {
		t.Fatalf("retain: %d %v", n, err)
	}
	if first, err := s.st.FirstWALSeq(); err != nil || first != older+1 {
		t.Fatalf("oldest log entry after retention: %d (%v), want %d (after the previous checkpoint)", first, err, older+1)
	}
	before, _, _ := s.StateDump()
	if err := s.st.DB.Update(func(txn *badger.Txn) error { return txn.Set([]byte(hublog.KeyCheckpoint), []byte("garbage")) }); err != nil {
		t.Fatal(err)
	}
	s.skipFinalCheckpoint = true
	_ = s.Shutdown(context.Background())
	o.Consumers = []Consumer{newCountingConsumer()}
	s2 := startHub(t, o)
	if after, _, _ := s2.StateDump(); !bytes.Equal(before, after) {
		t.Fatal("state recovered from the previous checkpoint differs")
	}
	if n := counterValue(t, s2.dm.fallbacks.WithLabelValues("previous")); n != 1 {
		t.Fatalf("fallbacks to the previous checkpoint: %v", n)
	}
}

// TestUncheckedPointerLoads: a checkpoint pointer in the plain JSON that
// stores written before checksums hold still loads, without a fallback.
func TestUncheckedPointerLoads(t *testing.T) {
	o := testOptions(t, t.TempDir())
	o.Consumers = []Consumer{newCountingConsumer()}
	s := startHub(t, o)
	d := newDevice(t, "tcp://"+s.BrokerAddr(), "d1")
	feed(t, s, []*device{d}, 1, 200)
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	before, _, _ := s.StateDump()
	st, err := hublog.OpenStore(o.DataDir, true, quietLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ck, _, err := st.LoadCheckpoint()
	if err != nil || ck == nil {
		t.Fatalf("checkpoint: %v %v", ck, err)
	}
	legacy := *ck
	legacy.StateCRC = nil
	v, _ := json.Marshal(&legacy)
	if err := st.DB.Update(func(txn *badger.Txn) error {
		if err := txn.Delete([]byte(hublog.KeyPrevCheckpoint)); err != nil {
			return err
		}
		return txn.Set([]byte(hublog.KeyCheckpoint), v)
	}); err != nil {
		t.Fatal(err)
	}
	_ = st.Close()
	o.Consumers = []Consumer{newCountingConsumer()}
	o.Registerer = nil
	s2 := startHub(t, o)
	if after, _, _ := s2.StateDump(); !bytes.Equal(before, after) {
		t.Fatal("state from an unchecked pointer differs")
	}
	if n := counterValue(t, s2.dm.fallbacks.WithLabelValues("previous")) + counterValue(t, s2.dm.fallbacks.WithLabelValues("log")); n != 0 {
		t.Fatalf("%v fallbacks", n)
	}
}

// TestDecodePointerDetectsDamage: a flipped byte anywhere in a
// checksummed pointer is damage, never a different checkpoint.
func TestDecodePointerDetectsDamage(t *testing.T) {
	crc := uint32(7)
	v := hublog.EncodePointer(&hublog.Checkpoint{Pos: 1234, Generation: 3, Chunks: 1, Bytes: 99, StateCRC: &crc})
	if ck, err := hublog.DecodePointer(v); err != nil || ck.Pos != 1234 {
		t.Fatalf("%+v %v", ck, err)
	}
	for i := range v {
		b := bytes.Clone(v)
		b[i] ^= 0x10
		if _, err := hublog.DecodePointer(b); err == nil {
			t.Fatalf("byte %d flipped: no error", i)
		}
	}
}

// TestDamagedPreviousCheckpoint: damage to the older checkpoint alone
// costs nothing: the newest is used, no fallback is counted.
func TestDamagedPreviousCheckpoint(t *testing.T) {
	o := testOptions(t, t.TempDir())
	o.Consumers = []Consumer{newCountingConsumer()}
	s := startHub(t, o)
	d := newDevice(t, "tcp://"+s.BrokerAddr(), "d1")
	feed(t, s, []*device{d}, 1, 100)
	if err := s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	feed(t, s, []*device{d}, 101, 200)
	before, _, _ := s.StateDump()
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	st, err := hublog.OpenStore(o.DataDir, true, quietLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.DB.Update(func(txn *badger.Txn) error { return txn.Set([]byte(hublog.KeyPrevCheckpoint), []byte("CK\x02damaged")) }); err != nil {
		t.Fatal(err)
	}
	_ = st.Close()
	o.Consumers = []Consumer{newCountingConsumer()}
	o.Registerer = nil
	s2 := startHub(t, o)
	if after, _, _ := s2.StateDump(); !bytes.Equal(before, after) {
		t.Fatal("state differs")
	}
	if n := counterValue(t, s2.dm.fallbacks.WithLabelValues("previous")) + counterValue(t, s2.dm.fallbacks.WithLabelValues("log")); n != 0 {
		t.Fatalf("%v fallbacks", n)
	}
}
