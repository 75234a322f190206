package hub

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"
	"google.golang.org/protobuf/proto"

	"edgeflow/hub/batchview"
	"edgeflow/hub/eventtime"
	"edgeflow/hub/hubapi"
	"edgeflow/hub/hublog"
	"edgeflow/hub/ranges"
	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// TestEventBucketsCoverApplied: for random batches in both codecs, with
// every time method (the hub's estimate included), partial overlap and
// refused events, every event the applier applies lies in one of the
// buckets its entry is indexed under: the index and the query compute
// the same corrected time.
func TestEventBucketsCoverApplied(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	base := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	spreads := []int64{int64(time.Second), int64(time.Minute), int64(time.Hour), int64(24 * time.Hour), int64(30 * 24 * time.Hour)}
	methods := []wirepb.TimeMethod{wirepb.TimeMethod_TIME_METHOD_NTP, wirepb.TimeMethod_TIME_METHOD_UNTRUSTED, wirepb.TimeMethod_TIME_METHOD_HUB_SYNC, wirepb.TimeMethod_TIME_METHOD_REPAIRED}
	app := newApplier(nil, nil, nil, limitsWithDefaults(wire.Limits{}))
	sid := wire.NewStreamID()
	levels, methodsSeen, withRefused := map[byte]int{}, map[wirepb.TimeMethod]int{}, 0
	for i := range 400 {
		n := 1 + rng.IntN(50)
		spread := spreads[rng.IntN(len(spreads))]
		b := &wirepb.Batch{DeviceId: "d", StreamId: sid[:], FirstSeq: 10, SendTimeNs: base}
		for j := range n {
			m := methods[rng.IntN(len(methods))]
			ev := &wirepb.Event{Metric: "m", Value: float64(j), DeviceTimeNs: base + rng.Int64N(spread), MonoNs: int64(j), BootId: "b", Method: m}
			if rng.IntN(20) == 0 {
				ev.Value = math.NaN() // refused by the hub
			}
			if m != wirepb.TimeMethod_TIME_METHOD_UNTRUSTED {
				ev.OffsetNs = rng.Int64N(int64(2*time.Minute)) - int64(time.Minute)
			}
			b.Events = append(b.Events, ev)
		}
		body, err := proto.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		codec := []wire.Codec{wire.CodecZstd, wire.CodecColumns}[i%2]
		e := &hublog.Entry{Kind: hublog.KindBatch, Seq: uint64(i + 1), ServerTimeNs: base, Device: "d",
			Payload: wire.FrameWith(wire.MsgBatch, codec, body),
			Fresh:   []ranges.SeqRange{{First: 10 + uint64(rng.IntN(n)), Last: 9 + uint64(n)}},
			Est:     hublog.HubEstimate{OK: rng.IntN(2) == 0, OffsetNs: rng.Int64N(int64(time.Hour)), UncertaintyNs: 1e6}}
		if rng.IntN(2) == 0 {
			e.Fresh[0].First = 10 // the whole batch, as most are
		}
		v, err := app.parseStored(e)
		if err == nil {
			err = batchview.ValidateBatch(v, "d")
		}
		if err != nil {
			t.Fatal(err)
		}
		e.Refused = eventtime.FreshRefused(v, e.Fresh)
		if len(e.Refused) > 0 {
			withRefused++
		}
		// What the committer writes from a decode worker's set is what
		// retention and the one-time build compute from the stored entry.
		p := &pending{}
		p.describe(v)
		p.times.Prepare(v, p.first, p.last)
		live, stored := eventtime.AppendKVs(nil, e, v, &p.times), eventtime.AppendKVs(nil, e, v, nil)
		if !slices.EqualFunc(live, stored, func(a, b eventtime.KV) bool {
			return bytes.Equal(a.Key, b.Key) && bytes.Equal(a.Value, b.Value)
		}) {
			t.Fatalf("batch %d: the committer's keys %v differ from the stored entry's %v", i, live, stored)
		}
		level, buckets, last := indexBuckets(t, stored)
		applied := app.build(e, v).Events
		if len(applied) > 0 && len(buckets) == 0 || len(buckets) > min(len(applied), eventtime.MaxKeys) {
			t.Fatalf("batch %d: %d buckets for %d applied events", i, len(buckets), len(applied))
		}
		levels[level]++
		for _, ev := range applied {
			methodsSeen[ev.Method]++
			if level == hublog.EventIndexLevelAll && (ev.EventTimeNs < buckets[0] || ev.EventTimeNs > last) {
				t.Fatalf("batch %d (%v): event %d at %d (%v) outside the catch-all span [%d, %d]", i, codec, ev.Seq, ev.EventTimeNs, ev.Method, buckets[0], last)
			}
			if size := bucketSizes[min(level, 2)]; level != hublog.EventIndexLevelAll && !slices.ContainsFunc(buckets, func(b int64) bool {
				return b <= ev.EventTimeNs && ev.EventTimeNs-b < size
			}) {
				t.Fatalf("batch %d (%v): event %d at %d (%v) in none of level %d's buckets %v", i, codec, ev.Seq, ev.EventTimeNs, ev.Method, level, buckets)
			}
		}
	}
	if len(levels) != hublog.EventIndexLevelAll+1 || withRefused == 0 || methodsSeen[wirepb.TimeMethod_TIME_METHOD_HUB_ESTIMATE] == 0 || methodsSeen[wirepb.TimeMethod_TIME_METHOD_UNTRUSTED] == 0 {
		t.Fatalf("the random batches did not reach every level and method: levels %v, methods %v, %d with refused events", levels, methodsSeen, withRefused)
	}
}

// bucketSizes are the event-time index's bucket sizes at levels 0, 1
// and 2 (a minute, an hour, a day), in ns.
var bucketSizes = [...]int64{int64(time.Minute), int64(time.Hour), int64(24 * time.Hour)}

// indexBuckets reads an entry's index keys back: their level, the bucket
// of each, and at the catch-all level the span's end (the key's value).
func indexBuckets(t *testing.T, kvs []eventtime.KV) (level byte, buckets []int64, last int64) {
	t.Helper()
	for _, x := range kvs {
		k, err := hublog.ParseEventIndexKey(x.Key)
		if err != nil {
			t.Fatal(err)
		}
		if len(buckets) > 0 && k.Level != level {
			t.Fatalf("an entry's keys at levels %d and %d", level, k.Level)
		}
		level, buckets = k.Level, append(buckets, k.Bucket)
		if k.Level == hublog.EventIndexLevelAll {
			if len(x.Value) != 8 {
				t.Fatalf("catch-all key's value %x, want 8 bytes", x.Value)
			}
			last = hublog.UnsortableNs(binary.BigEndian.Uint64(x.Value))
		}
	}
	return level, buckets, last
}

// TestEventsByEventTime: through a real hub, a device uploads now events
// from two hours ago, from yesterday and from five days a week ago (one
// batch in the catch-all); every query by event time finds exactly the
// events in its range, whatever their arrival, in order, paging with
// next_from, and reads exactly the batches whose index buckets (or
// catch-all span) overlap it. arrived_within
// still filters by arrival when given.
func TestEventsByEventTime(t *testing.T) {
	dir := t.TempDir()
	o := aggTestOptions(t, dir)
	s := startHub(t, o)
	d := newDevice(t, "tcp://"+s.BrokerAddr(), "late1")
	now := time.Now().Truncate(time.Second)
	type sent struct {
		ns    int64
		value float64
	}
	var all []sent
	first := uint64(1)
	send := func(times []time.Time) {
		var ns []int64
		var vs []float64
		for _, tm := range times {
			ns, vs = append(ns, tm.UnixNano()), append(vs, float64(len(all)))
			all = append(all, sent{tm.UnixNano(), float64(len(all))})
		}
		d.send(timedBatch("late1", d.stream, first, ns, vs))
		first += uint64(len(times))
	}
	twoHours := now.Add(-2 * time.Hour).Truncate(time.Hour)
	for b := range 6 { // six batches of the hour two hours ago, each of 90 s
		var ts []time.Time
		for i := range 10 {
			ts = append(ts, twoHours.Add(time.Duration(b*600+i*10)*time.Second))
		}
		send(ts)
	}
	yesterday := now.Add(-26 * time.Hour)
	send([]time.Time{yesterday, yesterday.Add(time.Minute), yesterday.Add(2 * time.Hour)})
	week := now.Add(-7 * 24 * time.Hour)
	send([]time.Time{week, week.Add(24 * time.Hour), week.Add(48 * time.Hour), week.Add(72 * time.Hour), week.Add(96 * time.Hour)})
	send([]time.Time{now.Add(-time.Second)})
	slices.SortStableFunc(all, func(a, b sent) int { return cmp.Compare(a.ns, b.ns) })

	want := func(from, to time.Time) []float64 {
		var out []float64
		for _, e := range all {
			if e.ns >= from.UnixNano() && e.ns < to.UnixNano() {
				out = append(out, e.value)
			}
		}
		return out
	}
	check := func(from, to time.Time, scanned int) {
		t.Helper()
		r, got := eventValues(t, s, "late1", from, to)
		if w := want(from, to); !slices.Equal(got, w) {
			t.Fatalf("[%v, %v): events %v, want %v", from, to, got, w)
		}
		if r.Scanned != scanned {
			t.Fatalf("[%v, %v): %d entries read, want %d", from, to, r.Scanned, scanned)
		}
	}
	check(twoHours, twoHours.Add(time.Hour), 6)                          // the six batches
	check(twoHours.Add(10*time.Minute), twoHours.Add(11*time.Minute), 1) // the second one's minute buckets
	check(yesterday, yesterday.Add(time.Hour), 1)
	check(week.Add(24*time.Hour), week.Add(24*time.Hour+time.Second), 1) // the catch-all batch
	check(week.Add(-time.Hour), week, 0)                                 // before its span
	check(week.Add(-time.Hour), now.Add(time.Hour), 9)
	check(now.Add(-24*time.Hour), now.Add(time.Hour), 8) // not the catch-all, whose span ended 3 days ago

	// Paging through the hour two hours ago, 25 events a page.
	var paged []float64
	from := twoHours
	for page := 0; ; page++ {
		var r hubapi.EventsResponse
		code, body := getJSON(t, s.Handler(), fmt.Sprintf("/v1/events?device=late1&from=%d&to=%d&limit=25", from.UnixMilli(), twoHours.Add(time.Hour).UnixMilli()), &r)
		if code != 200 || page > 10 {
			t.Fatalf("page %d: %d %s", page, code, body)
		}
		for _, e := range r.Events {
			paged = append(paged, e.Value)
		}
		if !r.Truncated {
			break
		}
		next, err := time.Parse(time.RFC3339Nano, r.NextFrom)
		if err != nil {
			t.Fatal(err)
		}
		from = next
	}
	if w := want(twoHours, twoHours.Add(time.Hour)); !slices.Equal(paged, w) || len(w) != 60 {
		t.Fatalf("paged %d events %v, want %d", len(paged), paged, len(w))
	}

	// arrived_within filters by arrival: everything arrived just now.
	var r hubapi.EventsResponse
	q := fmt.Sprintf("/v1/events?device=late1&from=%d&to=%d&arrived_within=1m", twoHours.UnixMilli(), twoHours.Add(time.Hour).UnixMilli())
	if code, body := getJSON(t, s.Handler(), q, &r); code != 200 || len(r.Events) != 0 || r.Scanned != 0 {
		t.Fatalf("arrived within a minute of two hours ago: %d %s", code, body)
	}

	// The same after a restart (the index is in the store).
	_ = s.Shutdown(context.Background())
	s = startHub(t, o)
	check(twoHours, twoHours.Add(time.Hour), 6)
	check(week.Add(24*time.Hour), week.Add(24*time.Hour+time.Second), 1)
	check(week.Add(-time.Hour), now.Add(time.Hour), 9)
}

// TestEventIndexBuiltForOldStore opens a store written before the
// event-time index existed (no index keys, no marker, the arrival index
// that came before): the hub builds the index from the log once, deletes
// the old keys, and a query by event time finds the old events and the
// new ones.
func TestEventIndexBuiltForOldStore(t *testing.T) {
	dir := t.TempDir()
	o := aggTestOptions(t, dir)
	s := startHub(t, o)
	base := time.Now().Add(-3 * time.Hour).Truncate(time.Second)
	at := func(sec int) int64 { return base.Add(time.Duration(sec) * time.Second).UnixNano() }
	d := newDevice(t, "tcp://"+s.BrokerAddr(), "old1")
	d.send(timedBatch("old1", d.stream, 1, []int64{at(1), at(2)}, []float64{1, 2}))
	d.send(timedBatch("old1", d.stream, 3, []int64{at(3)}, []float64{3}))
	_ = s.Shutdown(context.Background())

	db, err := badger.Open(badger.DefaultOptions(filepath.Join(dir, "wal")).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	err = db.DropPrefix([]byte{hublog.PrefixEventIndex})
	if err == nil {
		err = db.Update(func(txn *badger.Txn) error {
			if err := txn.Delete([]byte(hublog.KeyEventIndex)); err != nil {
				return err
			}
			if err := txn.Set([]byte(hublog.KeyArrivalOld), []byte{0}); err != nil {
				return err
			}
			return txn.Set([]byte{hublog.PrefixArrivalOld, 'o', 'l', 'd', '1', 0, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0, 0, 0, 0, 1}, nil)
		})
	}
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}

	s2 := startHub(t, o)
	if n := countKeys(t, s2.st.DB, hublog.PrefixArrivalOld); n != 0 {
		t.Fatalf("%d keys of the old arrival index left", n)
	}
	if n := countKeys(t, s2.st.DB, hublog.KeyArrivalOld[0]); n != 0 {
		t.Fatalf("the old arrival index's marker is left")
	}
	if n := indexedEntries(t, s2.st); n != 2 {
		t.Fatalf("the built index names %d entries, want the 2 batches", n)
	}
	d2 := newDevice(t, "tcp://"+s2.BrokerAddr(), "old1")
	d2.send(timedBatch("old1", d2.stream, 1, []int64{at(4)}, []float64{4}))
	r, got := eventValues(t, s2, "old1", base, base.Add(time.Minute))
	if !slices.Equal(got, []float64{1, 2, 3, 4}) || r.Scanned != 3 {
		t.Fatalf("events %v, %d entries scanned", got, r.Scanned)
	}
}

// indexedEntries checks that every event-time index key of st names a
// stored log entry of its device and returns how many entries they name.
func indexedEntries(t *testing.T, st *hublog.Store) int {
	t.Helper()
	named := map[uint64]bool{}
	err := st.DB.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{hublog.PrefixEventIndex}})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			k, err := hublog.ParseEventIndexKey(it.Item().Key())
			if err != nil {
				return err
			}
			e, ok, err := hublog.ReadEntry(txn, k.Seq, k.ServerTimeNs)
			if err != nil {
				return err
			}
			if !ok || e.Device != k.Device || e.Kind != hublog.KindBatch {
				return fmt.Errorf("index key %+v names no batch entry of its device", k)
			}
			named[k.Seq] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return len(named)
}
