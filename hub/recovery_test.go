package hub

import (
	"bytes"
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"edgeflow/hub/hublog"
	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// fakeNow is an injected clock that tests move by hand.
type fakeNow struct {
	mu sync.Mutex
	t  time.Time
}

func (f *fakeNow) now() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.t }
func (f *fakeNow) add(d time.Duration) {
	f.mu.Lock()
	f.t = f.t.Add(d)
	f.mu.Unlock()
}

// feed sends batches of several devices, including redeliveries, overlaps,
// untrusted clocks and statuses, and waits until all are acked and applied.
func feed(t *testing.T, s *Server, devices []*device, from, to uint64) {
	t.Helper()
	mk := func(i int, d *device, seq uint64) *wirepb.Batch {
		b := makeBatch(d.id, d.stream, seq, 50)
		if i == 1 { // this device's clock was never synced
			for _, e := range b.Events {
				e.Method, e.OffsetNs = wirepb.TimeMethod_TIME_METHOD_UNTRUSTED, 0
			}
			b.Clock.Method = wirepb.TimeMethod_TIME_METHOD_UNTRUSTED
		}
		return b
	}
	for seq := from; seq <= to; seq += 50 {
		for i, d := range devices {
			b := mk(i, d, seq)
			if ack := d.send(b); ack.Status != wirepb.AckStatus_ACK_STATUS_OK {
				t.Fatalf("batch %d: %v", seq, ack)
			}
			if seq%150 == 1 { // a redelivery and an overlap now and then
				d.send(b)
				d.send(mk(i, d, seq+25))
			}
		}
	}
	st, _ := wire.EncodeStatus(&wirepb.Status{DeviceId: devices[0].id, Online: true, Backlog: &wirepb.Backlog{Events: to}})
	devices[0].publish(wire.StatusTopic(devices[0].id), st)
	waitFor(t, func() bool { i, _ := s.Device(devices[0].id); return i.Backlog.Events == to })
	waitApplied(t, s)
}

// waitApplied waits until the applier has caught up with the committer.
func waitApplied(t *testing.T, s *Server) {
	t.Helper()
	waitFor(t, func() bool {
		var applied uint64
		_ = s.inApplier(func() error { applied = s.app.lastSeq; return nil })
		return applied == s.com.committed.Load() && len(s.com.in) == 0
	})
}

// linearEstimator is a deterministic stand-in until hub/clockest.go lands:
// the minimum of server_time - send_time seen per device.
type linearEstimator struct{ min map[string]time.Duration }

func (l *linearEstimator) Observe(d string, send, server time.Time) {
	if l.min == nil {
		l.min = map[string]time.Duration{}
	}
	if v, ok := l.min[d]; !ok || server.Sub(send) < v {
		l.min[d] = server.Sub(send)
	}
}

func (l *linearEstimator) Estimate(d string) (time.Duration, time.Duration, bool) {
	v, ok := l.min[d]
	return v, time.Millisecond, ok
}

// TestCheckpointReplayEquality crashes a hub (no final checkpoint) after a
// mid-stream checkpoint and checks the recovered state equals the state
// before the crash, byte for byte; then a clean restart does too.
func TestCheckpointReplayEquality(t *testing.T) {
	opts := recoveryOptions(t)
	s1 := startHub(t, opts())
	devs := recoveryDevices(t, s1)
	feed(t, s1, devs, 1, 500)
	if err := s1.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	feed(t, s1, devs, 501, 1000)
	before, s2 := crashAndRecover(t, s1, opts())
	var doc stateDoc
	if err := json.Unmarshal(before, &doc); err != nil || !bytes.Contains(doc.Consumers["count"], []byte(`"hub_estimated":`)) {
		t.Fatalf("dump lacks the consumer state: %v", err)
	}
	if err := s2.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	s3 := startHub(t, opts()) // from the shutdown checkpoint, nothing to replay
	again, _, _ := s3.StateDump()
	if !bytes.Equal(before, again) {
		t.Fatal("state after a clean restart differs")
	}
	hubEstimated(t, s3)
}

// hubEstimated checks that the untrusted device's events were corrected
// by the hub's estimate and that the registry says so.
func hubEstimated(t *testing.T, s *Server) {
	cc := s.opts.Consumers[0].(*countingConsumer)
	cc.mu.Lock()
	defer cc.mu.Unlock()
	for k, c := range cc.Streams {
		if (k[:2] == "d2") != (c.Hub == c.Events) || c.Twice != 0 || c.Events != 1000 {
			t.Fatalf("%s: %+v", k, *c)
		}
	}
	if i, _ := s.Device("d2"); i.Clock.Source != "hub" || i.Clock.Method != "HUB_ESTIMATE" {
		t.Fatalf("d2 clock: %+v", i.Clock)
	}
}

// TestRetention deletes old log entries only once a checkpoint covers
// them, and a restart still recovers the state.
func TestRetention(t *testing.T) {
	dir := t.TempDir()
	clock := &fakeNow{t: time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)}
	o := testOptions(t, dir)
	o.Now, o.RetentionMaxAge = clock.now, time.Hour
	s := startHub(t, o)
	d := newDevice(t, "tcp://"+s.BrokerAddr(), "d1")
	feed(t, s, []*device{d}, 1, 500)
	clock.add(2 * time.Hour)
	if n, err := s.Retain(); err != nil || n != 0 {
		t.Fatalf("retained before a checkpoint: %d %v", n, err)
	}
	if err := s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	feed(t, s, []*device{d}, 501, 600) // newer than the cutoff: kept
	n, err := s.Retain()
	if err != nil || n == 0 {
		t.Fatalf("retain: %d %v", n, err)
	}
	left, batches := 0, 0
	_ = s.st.Replay(0, func(e *hublog.Entry) error {
		left++
		if e.Kind == hublog.KindBatch {
			batches++
		}
		return nil
	})
	if left == 0 || left >= n {
		t.Fatalf("%d entries left after deleting %d", left, n)
	}
	if named := indexedEntries(t, s.st); named != batches {
		t.Fatalf("the event-time index names %d entries, want the %d batch entries left", named, batches)
	}
	before, _, _ := s.StateDump()
	s.skipFinalCheckpoint = true
	_ = s.Shutdown(context.Background())
	s2 := startHub(t, o)
	after, _, _ := s2.StateDump()
	if !bytes.Equal(before, after) {
		t.Fatal("state differs after retention and restart")
	}
}

// TestCheckpointsDuringIngest: checkpoints taken over and over from two
// goroutines while devices send (the state is encoded on the applier, the
// write runs beside ingest) leave a state that a crash recovers exactly:
// the last checkpoint plus the log after it equals what was applied.
func TestCheckpointsDuringIngest(t *testing.T) {
	opts := recoveryOptions(t)
	s1 := startHub(t, opts())
	devs := recoveryDevices(t, s1)
	stop := make(chan struct{})
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			for {
				select {
				case <-stop:
					errs <- nil
					return
				default:
				}
				if err := s1.Checkpoint(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	feed(t, s1, devs, 1, 1000)
	close(stop)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	_, s2 := crashAndRecover(t, s1, opts())
	hubEstimated(t, s2)
}

// crashAndRecover dumps s1's state, stops it as a crash would (no final
// checkpoint), starts a hub with o on the same directory and requires the
// same state at the same log position. It returns the state and the new hub.
func crashAndRecover(t *testing.T, s1 *Server, o Options) ([]byte, *Server) {
	t.Helper()
	before, pos, err := s1.StateDump()
	if err != nil {
		t.Fatal(err)
	}
	s1.skipFinalCheckpoint = true
	if err := s1.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	s2 := startHub(t, o)
	after, pos2, err := s2.StateDump()
	if err != nil {
		t.Fatal(err)
	}
	if pos != pos2 || !bytes.Equal(before, after) {
		t.Fatalf("state after recovery differs (positions %d, %d):\nbefore %s\nafter  %s", pos, pos2, before, after)
	}
	return before, s2
}

// recoveryOptions makes options for successive hubs on one data directory
// with a fake clock, a counting consumer and the hub's clock estimator.
func recoveryOptions(t *testing.T) func() Options {
	dir := t.TempDir()
	clock := &fakeNow{t: time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)}
	return func() Options {
		o := testOptions(t, dir)
		o.Now, o.Consumers, o.ClockEstimator = clock.now, []Consumer{newCountingConsumer()}, &linearEstimator{}
		return o
	}
}

// recoveryDevices attaches the devices feed sends for: d1, d2 (whose clock
// was never synced) and d3.
func recoveryDevices(t *testing.T, s *Server) []*device {
	var devs []*device
	for _, id := range []string{"d1", "d2", "d3"} {
		devs = append(devs, newDevice(t, "tcp://"+s.BrokerAddr(), id))
	}
	return devs
}

// countKeys counts the keys in db that start with prefix.
func countKeys(t *testing.T, db *badger.DB, prefix byte) int {
	t.Helper()
	n := 0
	err := db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefix}})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
