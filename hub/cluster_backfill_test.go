package hub

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/nats-io/nats.go/jetstream"

	"edgeflow/hub/hublog"
	"edgeflow/hub/natslog"
	"edgeflow/hub/ranges"
	"edgeflow/internal/testnats"
)

// listedEvents is the part of GET /v1/events these tests read (a type of
// their own, so the listing check reads any build's answer).
type listedEvents struct {
	Events []struct {
		Stream string  `json:"stream"`
		Seq    uint64  `json:"seq"`
		Value  float64 `json:"value"`
		TimeMs int64   `json:"time_ms"`
	} `json:"events"`
	Truncated        bool   `json:"truncated"`
	Backfilling      bool   `json:"backfilling"`
	IncompleteBefore string `json:"incomplete_before"`
}

// listAll reads device's events in [base, base+1h) from /v1/events.
func listAll(t *testing.T, s *Server, device string, base time.Time) listedEvents {
	t.Helper()
	path := fmt.Sprintf("/v1/events?device=%s&from=%s&to=%s&limit=10000", url.QueryEscape(device),
		url.QueryEscape(base.Format(time.RFC3339)), url.QueryEscape(base.Add(time.Hour).Format(time.RFC3339)))
	var r listedEvents
	if code, body := getJSON(t, s.Handler(), path, &r); code != 200 {
		t.Fatalf("%s: %d %s", path, code, body)
	}
	if r.Truncated {
		t.Fatalf("%s: truncated", path)
	}
	return r
}

// checkListing says what is wrong with a's events as /v1/events lists
// them ("" when every sent event is listed exactly once, with its value
// and time), and whether the hub still says it is backfilling.
func checkListing(t *testing.T, s *Server, a *clusterAgent, base time.Time) (problem string, backfilling bool) {
	t.Helper()
	r := listAll(t, s, a.id, base)
	seen := map[uint64]int{}
	streams := map[string]bool{}
	for _, e := range r.Events {
		seen[e.Seq]++
		streams[e.Stream] = true
		if e.Seq == 0 || e.Seq > uint64(len(a.sent)) {
			return fmt.Sprintf("%s: event seq %d was never sent", a.id, e.Seq), r.Backfilling
		}
		if want := a.sent[e.Seq-1]; e.Value != want.value || e.TimeMs != want.t/1e6 {
			return fmt.Sprintf("%s: seq %d listed as %v at %d ms, sent %v at %d ms", a.id, e.Seq, e.Value, e.TimeMs, want.value, want.t/1e6), r.Backfilling
		}
	}
	if len(streams) > 1 {
		return fmt.Sprintf("%s: %d streams listed", a.id, len(streams)), r.Backfilling
	}
	missing, twice := 0, 0
	for seq := 1; seq <= a.next; seq++ {
		switch seen[uint64(seq)] {
		case 0:
			missing++
		case 1:
		default:
			twice++
		}
	}
	if missing > 0 || twice > 0 {
		return fmt.Sprintf("%s: %d events listed of %d sent: %d missing, %d listed more than once", a.id, len(r.Events), a.next, missing, twice), r.Backfilling
	}
	return "", r.Backfilling
}

// waitListing waits until /v1/events lists every agent's events exactly
// once and the hub no longer backfills; it fails at once on an event
// listed twice or never sent.
func waitListing(t *testing.T, s *Server, agents []*clusterAgent, base time.Time, what string) {
	t.Helper()
	deadline := time.Now().Add(clusterWithin)
	for {
		var problem string
		backfilling := false
		for _, a := range agents {
			p, bf := checkListing(t, s, a, base)
			backfilling = backfilling || bf
			if p != "" && problem == "" {
				problem = p
			}
		}
		if problem == "" && !backfilling {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: after %v: %s (backfilling %v)", what, clusterWithin, problem, backfilling)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// restorePhase runs a hub, sends events before and after a state
// snapshot, and stops the hub as if it crashed; it returns the agents,
// the events' base time and the NATS servers.
func restorePhase(t *testing.T) ([]*clusterAgent, time.Time, *testnats.Cluster) {
	agents, base, c, _ := restorePhaseAt(t)
	return agents, base, c
}

// restorePhaseAt is restorePhase that also returns the snapshot's
// positions.
func restorePhaseAt(t *testing.T) ([]*clusterAgent, time.Time, *testnats.Cluster, map[int]uint64) {
	c := testnats.Start(t, 1)
	o, cc := clusterOptions(t, t.TempDir(), c, 1)
	s, stop := startClusterHub(t, o)
	agents := startClusterAgents(t, c, []string{"dev-1", "site.2", "dev-3"}, 40)
	base := time.Now().Add(-2 * time.Hour).Truncate(time.Hour)
	send := func(n int, what string) {
		for _, a := range agents {
			a.appendEvents(t, base, n)
		}
		waitAcked(t, agents, what)
		waitAllApplied(t, cc, agents, what)
	}
	send(300, "before the snapshot")
	waitUntil(t, "the snapshot store open", func() bool { return s.cl.snap.store.Load() != nil })
	if err := s.snapshotNow(context.Background()); err != nil {
		t.Fatal(err)
	}
	snapPos := s.cl.snap.lastPosSeen()
	send(100, "after the snapshot")
	waitListing(t, s, agents, base, "the first hub")
	stop(true)
	return agents, base, c, snapPos
}

// TestClusterEventsAfterRestore: a hub restored from a state snapshot on
// an empty data directory lists, once its backfill from the stream is
// done, every event exactly once: those the snapshot covers (backfilled)
// and those read after it (logged as they are applied).
func TestClusterEventsAfterRestore(t *testing.T) {
	agents, base, c := restorePhase(t)
	o2, cc2 := clusterOptions(t, t.TempDir(), c, 1)
	s2, _ := startClusterHub(t, o2)
	waitAllApplied(t, cc2, agents, "after the restore")
	waitListing(t, s2, agents, base, "after the restore")

	// The log's retention deletes backfilled entries by age, with their
	// index keys: here all of them; what was logged after the restore
	// stays listed.
	n, err := s2.retainBackfilled(time.Now().Add(time.Hour).UnixNano())
	if err != nil || n == 0 {
		t.Fatalf("retention of backfilled entries: %d deleted, %v", n, err)
	}
	for _, a := range agents {
		r := listAll(t, s2, a.id, base)
		if len(r.Events) != 100 || r.Events[0].Seq != 301 {
			t.Fatalf("%s after the backfilled entries' retention: %d events listed, want the 100 logged after the restore", a.id, len(r.Events))
		}
	}
	err = s2.st.DB.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{hublog.PrefixEventIndex}})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			if k, err := hublog.ParseEventIndexKey(it.Item().Key()); err != nil || hublog.IsBackfilled(k.Seq) {
				return fmt.Errorf("index key %x left (%v)", it.Item().Key(), err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestClusterBackfillResumes: a backfill stopped after two of its
// transactions, as if the hub died there, resumes on the next start from
// its recorded progress: every event listed exactly once, and the second
// run writes only the entries the first did not.
func TestClusterBackfillResumes(t *testing.T) {
	agents, base, c := restorePhase(t)
	dir := t.TempDir()
	o2, _ := clusterOptions(t, dir, c, 1)
	s2, err := New(o2)
	if err != nil {
		t.Fatal(err)
	}
	s2.cl.bf.chunk, s2.cl.bf.stopAfter = 3, 2
	if err := s2.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the first run's first transaction", func() bool { return counterValue(t, s2.cl.bf.m.entries) > 0 })
	// A stopped backfill leaves the flag up: the listing is not whole yet.
	if running, _ := s2.backfillState(); !running {
		t.Fatal("a stopped backfill says it is done")
	}
	// Shut down as after a crash: the backfill, stopped or in its second
	// transaction, goes no further.
	s2.skipFinalCheckpoint = true
	if err := s2.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	first := counterValue(t, s2.cl.bf.m.entries)
	st, err := hublog.OpenStore(dir, true, o2.Logger)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := st.LoadBackfillPlan()
	st.Close()
	if err != nil || plan == nil || plan.Finished || plan.Through == 0 || plan.Entries != uint64(first) {
		t.Fatalf("plan after the first run: %+v, %v; want unfinished, with progress and %v entries", plan, err, first)
	}

	o3, cc3 := clusterOptions(t, dir, c, 1)
	s3, _ := startClusterHub(t, o3)
	waitAllApplied(t, cc3, agents, "after the resume")
	waitListing(t, s3, agents, base, "after the resume")
	done, err := s3.st.LoadBackfillPlan()
	if err != nil || !done.Finished {
		t.Fatalf("plan after the resume: %+v, %v", done, err)
	}
	second := counterValue(t, s3.cl.bf.m.entries)
	if uint64(first+second) != done.Entries || second == 0 {
		t.Fatalf("entries: %v in the first run, %v in the second, %d in the plan", first, second, done.Entries)
	}
	if gaugeValue(t, s3.cl.bf.m.running) != 0 || gaugeValue(t, s3.cl.bf.m.remaining) != 0 {
		t.Fatal("the backfill gauges stay up after it finished")
	}
	// The per-stream ranges go once the backfill is finished.
	waitUntil(t, "the backfill's ranges deleted", func() bool {
		left := 0
		_ = s3.st.DB.View(func(txn *badger.Txn) error {
			for _, p := range hublog.BackfillRangesPrefixes() {
				it := txn.NewIterator(badger.IteratorOptions{Prefix: p})
				for it.Rewind(); it.Valid(); it.Next() {
					left++
				}
				it.Close()
			}
			return nil
		})
		return left == 0
	})
}

// TestClusterBackfillAfterRetention: the stream has dropped its oldest
// messages (a purge stands in for retention) before the restored hub
// backfills: it lists what the stream still holds, each event once, every
// event after the snapshot, and says from when on its answer is whole
// (incomplete_before: the time of the oldest message left).
func TestClusterBackfillAfterRetention(t *testing.T) {
	agents, base, c, snapPos := restorePhaseAt(t)
	low := uint64(0)
	for _, seq := range snapPos {
		if low == 0 || seq < low {
			low = seq
		}
	}
	cut := low/2 + 1 // drops about half of what the snapshot covers
	ctx := context.Background()
	js := c.JetStream(t)
	stream, err := js.Stream(ctx, natslog.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Purge(ctx, jetstream.WithPurgeSequence(cut)); err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil || info.State.FirstSeq != cut {
		t.Fatalf("after the purge: %+v, %v; want the first sequence %d", info, err, cut)
	}

	o2, cc2 := clusterOptions(t, t.TempDir(), c, 1)
	s2, _ := startClusterHub(t, o2)
	waitAllApplied(t, cc2, agents, "after the restore")
	var r listedEvents
	waitUntil(t, "the backfill done", func() bool {
		r = listAll(t, s2, agents[0].id, base)
		return !r.Backfilling
	})
	if want := info.State.FirstTime.UTC().Format(time.RFC3339Nano); r.IncompleteBefore != want {
		t.Fatalf("incomplete_before %q, want the oldest message's time %q", r.IncompleteBefore, want)
	}
	listed, sent := 0, 0
	for _, a := range agents {
		r := listAll(t, s2, a.id, base)
		seen := map[uint64]bool{}
		for _, e := range r.Events {
			if seen[e.Seq] || e.Seq == 0 || e.Seq > uint64(a.next) {
				t.Fatalf("%s: seq %d listed twice or never sent", a.id, e.Seq)
			}
			seen[e.Seq] = true
		}
		for seq := 301; seq <= a.next; seq++ {
			if !seen[uint64(seq)] {
				t.Fatalf("%s: seq %d, sent after the snapshot, not listed", a.id, seq)
			}
		}
		listed += len(r.Events)
		sent += a.next
	}
	if listed >= sent {
		t.Fatalf("%d of %d events listed: the purge dropped nothing", listed, sent)
	}
	t.Logf("%d of %d events listed after the stream dropped sequences below %d", listed, sent, cut)
}

// TestBackfillIntersect: the events a backfilled batch lists are the
// parts of its missing ranges that the snapshot's ranges hold.
func TestBackfillIntersect(t *testing.T) {
	r := func(pairs ...uint64) []ranges.SeqRange {
		var out []ranges.SeqRange
		for i := 0; i < len(pairs); i += 2 {
			out = append(out, ranges.SeqRange{First: pairs[i], Last: pairs[i+1]})
		}
		return out
	}
	for _, tc := range []struct {
		name            string
		want, have, out []ranges.SeqRange
	}{
		{"inside", r(1, 10), r(1, 100), r(1, 10)},
		{"none held", r(1, 10), nil, nil},
		{"disjoint", r(1, 10), r(11, 20), nil},
		{"overlaps both ends", r(5, 15), r(1, 7, 12, 20), r(5, 7, 12, 15)},
		{"several", r(1, 3, 8, 12), r(2, 9, 11, 11), r(2, 3, 8, 9, 11, 11)},
		{"one point", r(4, 4), r(4, 4), r(4, 4)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := intersect(tc.want, tc.have); !slices.Equal(got, tc.out) {
				t.Fatalf("intersect(%v, %v) = %v, want %v", tc.want, tc.have, got, tc.out)
			}
		})
	}
}
