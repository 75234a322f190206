package hub

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"edgeflow/hub/hubapi"
	"edgeflow/hub/natslog"
	"edgeflow/internal/testnats"
	"edgeflow/wire"
)

// TestClusterAttributes: on a cluster-mode hub (one real NATS server),
// attribute versions written through the HTTP API (PUT and bulk) are
// published to the stream on the device's partition and applied from it;
// events before and after a move, late ones and duplicated ones (the same
// stream and sequence numbers in other batches, again after each restart)
// give group_by=attr.site equal to the brute-force join. A malformed
// attribute entry in the stream is counted and not applied. The answers
// hold after a crash (replay of the local log and the stream after its
// committed positions), after a clean restart (the checkpoint), on a hub
// with an empty data directory that imports the partition checkpoints
// (versions included), and on one without them (a replay of the whole
// stream). The joins are asked with local=1: the fleet-wide answer
// merges partials, which refuse attr.* dimensions.
func TestClusterAttributes(t *testing.T) {
	c := testnats.Start(t, 1)
	dir := t.TempDir()
	opts := func(dir string) Options {
		o, _ := clusterOptions(t, dir, c, 1)
		o.HTTPReadToken, o.HTTPWriteToken = attrReadToken, attrWriteToken
		return o
	}
	s, stop := startClusterHub(t, opts(dir))
	base := time.Now().UTC().Truncate(time.Minute).Add(-30 * time.Minute)
	move := base.Add(10 * time.Minute)
	streams := map[string]wire.StreamID{"pump-1": wire.NewStreamID(), "pump.2": wire.NewStreamID(), "pump-3": wire.NewStreamID()}
	var sent []sentEvent
	var versions []attrVersion
	// publish puts a batch of device in the stream as NATS' MQTT listener
	// would; record is false for a duplicate (the hub must drop it).
	publish := func(s *Server, device string, first uint64, record bool, offsets ...time.Duration) {
		t.Helper()
		var ts []int64
		var vs []float64
		for i, off := range offsets {
			ts = append(ts, base.Add(off).UnixNano())
			vs = append(vs, float64(int(first)+i)+float64(len(device)))
			if record {
				sent = append(sent, sentEvent{device, ts[i], vs[i]})
			}
		}
		if _, err := s.cl.Log().Publish(context.Background(), device, encodeBatch(t, timedBatch(device, streams[device], first, ts, vs))); err != nil {
			t.Fatal(err)
		}
	}
	put := func(s *Server, device, site string, from time.Time) {
		t.Helper()
		putAttrs(t, s, device, site, from)
		versions = append(versions, attrVersion{device, site, from.UnixNano()})
	}
	check := func(s *Server, what string) {
		t.Helper()
		waitAttrApplied(t, s, base, uint64(len(sent)))
		waitUntil(t, what+": the hub owns every partition", func() bool { return len(owned(s)) == s.opts.NATS.Log.Partitions })
		// local=1: a fleet-wide answer merges partials, which refuse attr.*
		// dimensions; this hub owns every partition.
		if got, want := localSites(t, s, base), bruteSites(sent, versions); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s:\n got %v\nwant %v", what, got, want)
		}
	}

	put(s, "pump-1", "north", base)
	put(s, "pump.2", "north", base)
	publish(s, "pump-1", 1, true, time.Minute, 2*time.Minute)
	publish(s, "pump.2", 1, true, time.Minute, 7*time.Minute, 12*time.Minute)
	publish(s, "pump-3", 1, true, 3*time.Minute)                     // no version: site ""
	put(s, "pump-1", "south", move)                                  // the move
	publish(s, "pump-1", 3, true, 11*time.Minute, 12*time.Minute)    // after it
	publish(s, "pump-1", 5, true, 9*time.Minute, 9*time.Minute+30e9) // late: from before it
	publish(s, "pump-1", 1, false, time.Minute, 2*time.Minute)       // duplicate of 1..2
	publish(s, "pump-1", 4, false, 12*time.Minute, 9*time.Minute)    // duplicate of 4..5, another batch
	check(s, "after the move")

	// Bulk: a retroactive correction of pump.2 and pump-3's first version.
	bulk := fmt.Sprintf("{\"id\":\"pump.2\",\"attributes\":{\"site\":\"east\"},\"effective_from\":%q}\n{\"id\":\"pump-3\",\"attributes\":{\"site\":\"west\"},\"effective_from\":%d}\n",
		base.Add(5*time.Minute).Format(time.RFC3339), base.UnixMilli())
	if code, body := attrDo(t, s, "POST", "/v1/attributes/bulk", attrWriteToken, bulk); code != 200 || !strings.Contains(body, `"written": 2`) {
		t.Fatalf("bulk: %d %s", code, body)
	}
	versions = append(versions, attrVersion{"pump.2", "east", base.Add(5 * time.Minute).UnixNano()}, attrVersion{"pump-3", "west", base.UnixNano()})
	check(s, "after the bulk correction")

	// A malformed attribute entry (written to the stream by something
	// other than a hub) is counted and not applied.
	before := s.attrs.AttrVersions("pump-1")
	if _, err := s.cl.Log().PublishAttrs(context.Background(), []natslog.Entry{{Device: "pump-1", Data: []byte{1, 0x80}}}); err != nil {
		t.Fatal(err)
	}
	publish(s, "pump-3", 2, true, 4*time.Minute) // behind it in another partition or the same: applied
	check(s, "after a malformed entry")
	waitUntil(t, "the malformed entry counted", func() bool {
		return counterValue(t, s.clm.AttrEntries.WithLabelValues("malformed")) == 1
	})
	if got := s.attrs.AttrVersions("pump-1"); fmt.Sprint(got) != fmt.Sprint(before) {
		t.Fatalf("a malformed entry changed pump-1's versions: %v, was %v", got, before)
	}
	if got := counterValue(t, s.clm.AttrEntries.WithLabelValues("logged")); got != 5 {
		t.Fatalf("%v attribute entries logged, want 5", got)
	}

	// Crash: no final checkpoint; the restart replays the local log, and
	// what the stream holds after the committed positions.
	stop(true)
	s2, stop2 := startClusterHub(t, opts(dir))
	check(s2, "after the crash")
	publish(s2, "pump.2", 2, false, 7*time.Minute) // duplicate across the restart
	put(s2, "pump.2", "north", base.Add(20*time.Minute))
	publish(s2, "pump.2", 4, true, 21*time.Minute, 6*time.Minute) // one after the new version, one late
	check(s2, "after the restart's writes")
	stop2(false)

	// A clean stop wrote a checkpoint: the next start restores the table
	// from it.
	s4, stop4 := startClusterHub(t, opts(dir))
	check(s4, "after a restart from the checkpoint")
	stop4(false)

	// An empty data directory while the partition checkpoints the clean
	// stop saved are there: the hub imports them, the versions with the
	// engine state (it reads none of them from the stream).
	s3, stop3 := startClusterHub(t, opts(t.TempDir()))
	check(s3, "empty data directory, partition checkpoints imported")
	if n := counterValue(t, s3.own.m.takeovers.WithLabelValues("checkpoint")); n == 0 {
		t.Fatal("the hub on an empty data directory imported no partition checkpoint")
	}
	code, body := attrDo(t, s3, "GET", "/v1/devices/pump.2/attributes/history", attrReadToken, "")
	if code != 200 || strings.Count(body, `"site"`) != 3 {
		t.Fatalf("history: %d %s", code, body)
	}
	stop3(false)

	// Without partition checkpoints: the whole stream is replayed,
	// versions in order with the batches, the malformed entry skipped
	// again.
	forgetPartitionCheckpoints(t, c)
	s5, _ := startClusterHub(t, opts(t.TempDir()))
	check(s5, "empty data directory, the whole stream replayed")
	if got := counterValue(t, s5.clm.AttrEntries.WithLabelValues("malformed")); got != 1 {
		t.Fatalf("the replay counted %v malformed entries, want 1", got)
	}
	code, body = attrDo(t, s5, "GET", "/v1/devices/pump.2/attributes/history", attrReadToken, "")
	if code != 200 || strings.Count(body, `"site"`) != 3 {
		t.Fatalf("history: %d %s", code, body)
	}
}

// TestClusterAttributesStoredNotApplied: a write the stream stores while
// this hub, the partition's owner, does not get to apply it (its applier
// held, as a hub falling behind) answers 202 naming the partition and
// sequence, and the version is applied once the applier runs again. A
// write while the hub owns no partition (its cluster side stopped)
// answers once the stream stored it, and the next hub on the data
// directory reads it from the stream and applies it.
func TestClusterAttributesStoredNotApplied(t *testing.T) {
	c := testnats.Start(t, 1)
	dir := t.TempDir()
	o, _ := clusterOptions(t, dir, c, 1)
	o.HTTPReadToken, o.HTTPWriteToken = attrReadToken, attrWriteToken
	s, stop := startClusterHub(t, o)
	from := time.Now().UTC().Truncate(time.Minute).Add(-time.Hour)
	waitUntil(t, "this hub owns pump-1's partition", func() bool {
		m := s.LeaseManager()
		if m == nil {
			return false
		}
		_, owns := m.Owns(natslog.PartitionOf("pump-1", o.NATS.Log.Partitions))
		return owns
	})
	putAttrs(t, s, "pump-1", "north", from)
	s.cl.attrs.applyWait = 100 * time.Millisecond
	release, held := make(chan struct{}), make(chan struct{})
	go func() {
		_ = s.inApplier(func() error { close(held); <-release; return nil })
	}()
	<-held
	body := fmt.Sprintf(`{"attributes":{"site":"south"},"effective_from":%q}`, from.Add(time.Minute).Format(time.RFC3339))
	code, resp := attrDo(t, s, "PUT", "/v1/devices/pump-1/attributes", attrWriteToken, body)
	want := fmt.Sprintf("partition %d, sequence 2", natslog.PartitionOf("pump-1", o.NATS.Log.Partitions))
	if code != 202 || !strings.Contains(resp, want) {
		close(release)
		t.Fatalf("write with the applier held: %d %s, want 202 naming %s", code, resp, want)
	}
	close(release)
	waitUntil(t, "the stored version applied once the applier runs", func() bool {
		v, ok := s.attrs.At("pump-1", from.Add(time.Minute).UnixNano())
		return ok && v.Attrs["site"] == "south"
	})

	s.stopCluster()
	body = fmt.Sprintf(`{"attributes":{"site":"east"},"effective_from":%q}`, from.Add(2*time.Minute).Format(time.RFC3339))
	if code, resp := attrDo(t, s, "PUT", "/v1/devices/pump-1/attributes", attrWriteToken, body); code != 200 {
		t.Fatalf("write while this hub owns no partition: %d %s, want 200 once stored", code, resp)
	}
	stop(false)
	o2, _ := clusterOptions(t, dir, c, 1)
	s2, _ := startClusterHub(t, o2)
	waitUntil(t, "the stored version applied after the restart", func() bool {
		v, ok := s2.attrs.At("pump-1", from.Add(2*time.Minute).UnixNano())
		return ok && v.Attrs["site"] == "east"
	})
}

// TestClusterAttributesBulkPartlyStored: a bulk write of eight versions
// whose stream takes only three more messages (max_msgs with discard new,
// standing in for a stream that stops taking writes part way) answers 503
// saying the first three are stored, with stored: 3; those three are
// applied and the rest are not. Sent again once the stream takes
// messages, the whole write is applied, and the three already stored are
// not kept twice.
func TestClusterAttributesBulkPartlyStored(t *testing.T) {
	c := testnats.Start(t, 1)
	o, _ := clusterOptions(t, t.TempDir(), c, 1)
	o.HTTPReadToken, o.HTTPWriteToken = attrReadToken, attrWriteToken
	s, _ := startClusterHub(t, o)
	waitUntil(t, "this hub owns every partition", func() bool {
		m := s.LeaseManager()
		if m == nil {
			return false
		}
		for p := range o.NATS.Log.Partitions {
			if _, ok := m.Owns(p); !ok {
				return false
			}
		}
		return true
	})
	from := time.Now().UTC().Truncate(time.Minute).Add(-time.Hour)
	var body strings.Builder
	devices := make([]string, 8)
	for i := range devices {
		devices[i] = fmt.Sprintf("pump-%d", i+1)
		fmt.Fprintf(&body, `{"id":%q,"attributes":{"site":"s%d"},"effective_from":%q}`+"\n", devices[i], i, from.Format(time.RFC3339))
	}

	ctx := context.Background()
	js := c.JetStream(t)
	stream, err := js.Stream(ctx, s.opts.NATS.Log.Stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	full := info.Config
	limited := full
	limited.MaxMsgs, limited.Discard = int64(info.State.Msgs)+3, jetstream.DiscardNew
	if _, err := js.UpdateStream(ctx, limited); err != nil {
		t.Fatal(err)
	}
	code, resp := attrDo(t, s, "POST", "/v1/attributes/bulk", attrWriteToken, body.String())
	var ae hubapi.APIError
	if err := json.Unmarshal([]byte(resp), &ae); err != nil || code != 503 || ae.Stored == nil || *ae.Stored != 3 ||
		!strings.Contains(ae.Error, "writes 1-3 of 8 are stored") {
		t.Fatalf("bulk write into a stream that takes 3 more messages: %d %s; want 503, stored 3", code, resp)
	}
	waitUntil(t, "the three stored versions applied", func() bool {
		for _, d := range devices[:3] {
			if _, ok := s.attrs.At(d, from.UnixNano()); !ok {
				return false
			}
		}
		return true
	})
	for _, d := range devices[3:] {
		if v, ok := s.attrs.At(d, from.UnixNano()); ok {
			t.Fatalf("%s has a version the stream refused: %+v", d, v)
		}
	}

	if _, err := js.UpdateStream(ctx, full); err != nil {
		t.Fatal(err)
	}
	if code, resp := attrDo(t, s, "POST", "/v1/attributes/bulk", attrWriteToken, body.String()); code != 200 {
		t.Fatalf("the bulk write again: %d %s", code, resp)
	}
	for i, d := range devices {
		v, ok := s.attrs.At(d, from.UnixNano())
		if !ok || v.Attrs["site"] != fmt.Sprint("s", i) {
			t.Fatalf("%s after the write again: %+v %v", d, v, ok)
		}
		if n := len(s.attrs.AttrVersions(d)); n != 1 {
			t.Fatalf("%s holds %d versions, want 1", d, n)
		}
	}
}
