package sinks_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"edgeflow/hub"
	"edgeflow/hub/sinks"
	"edgeflow/internal/testnats"
	"edgeflow/wire"
)

// TestNATSSinkPublishesEveryRevisionOnce runs a hub with a nats sink on a
// real nats-server, kills and restarts the server and restarts the hub on
// the way, and checks that the stream holds each window update once (by
// message id) and that the newest update of each window equals
// /v1/aggregates.
func TestNATSSinkPublishesEveryRevisionOnce(t *testing.T) {
	nc := testnats.Start(t, 1)
	dir := t.TempDir()
	start := func() *hub.Server {
		return startSinkTestHub(t, sinkTestOptions(t, dir, sinks.Config{Name: "updates", Kind: sinks.KindNATS, URL: nc.URLs(), Metrics: []string{"temp"}, Events: true,
			Windows: []string{"tumbling:1m"}, GroupBy: []string{"device"}, Quantiles: []string{"p50"},
			BatchEntries: 3, PollInterval: 10 * time.Millisecond, MaxBackoff: 200 * time.Millisecond}))
	}
	srv := start()
	base := time.Now().Add(-3 * time.Hour).Truncate(time.Hour)
	at := func(i int) time.Time { return base.Add(time.Duration(i) * 2 * time.Second) }
	stream := wire.NewStreamID()
	d := newTestDevice(t, srv.BrokerAddr(), "n1", stream, 1)
	accepted := 0
	for i := 0; i < 150; i += 10 {
		var ts []time.Time
		for k := i; k < i+10; k++ {
			ts = append(ts, at(k))
		}
		accepted += d.send(ts)
		if i == 60 {
			nc.Kill(0)
			nc.Restart(0)
		}
	}
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv = start()
	d = newTestDevice(t, srv.BrokerAddr(), "n1", stream, d.next)
	accepted += d.send([]time.Time{at(3), at(40)}) // late: revisions of final windows
	for i := 150; i < 200; i += 10 {
		var ts []time.Time
		for k := i; k < i+10; k++ {
			ts = append(ts, at(k))
		}
		accepted += d.send(ts)
	}
	waitCaughtUp(t, srv, base, accepted)

	api := readAPI(t, srv.HTTPAddr(), base.Add(-time.Hour), base.Add(time.Hour))
	newest, ids, revisions, events := readStream(t, nc.URLs())
	for k, w := range api {
		if got, ok := newest[k]; !ok {
			t.Errorf("window %s: final in /v1/aggregates, never published", k)
		} else if got != w {
			t.Errorf("window %s: newest message %+v, API %+v", k, got, w)
		}
	}
	for k := range newest {
		if _, ok := api[k]; !ok {
			t.Errorf("window %s: published, not a final window of /v1/aggregates", k)
		}
	}
	for id, n := range ids {
		if n > 1 {
			t.Errorf("message id %s stored %d times", id, n)
		}
	}
	if revisions < 2 {
		t.Errorf("%d revision messages, want at least 2", revisions)
	}
	if events != accepted {
		t.Errorf("%d event messages (each id once), %d events accepted", events, accepted)
	}
	t.Logf("%d windows, %d messages, %d revisions, %d events", len(newest), len(ids), revisions, events)

	// A position lost after its messages were published (the crash
	// between the two): the sink republishes from the start under the
	// same ids, and JetStream stores none of them again.
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	deletePosition(t, nc.URLs(), "updates")
	srv = start()
	waitCaughtUp(t, srv, base, accepted)
	if _, again, _, _ := readStream(t, nc.URLs()); len(again) != len(ids) {
		t.Errorf("after replaying from position 0: %d messages, was %d", len(again), len(ids))
	} else if st := srv.SinkStatuses()[0]; st.RowsWritten != 0 {
		t.Errorf("the replay stored %d new messages, want 0 (all duplicates)", st.RowsWritten)
	}
}

func deletePosition(t *testing.T, url, sink string) {
	t.Helper()
	conn, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	js, err := jetstream.New(conn)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(context.Background(), "edgeflow_sink_positions")
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Purge(context.Background(), sink); err != nil {
		t.Fatal(err)
	}
}

// readStream reads every message of the sinks' stream and returns the
// newest (final, revision) of each window, the count of each message id,
// how many messages were revisions and how many were events (checked to
// carry their id device/stream/seq in header and body).
func readStream(t *testing.T, url string) (map[string]windowRow, map[string]int, int, int) {
	t.Helper()
	conn, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	js, err := jetstream.New(conn)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cons, err := js.OrderedConsumer(ctx, "EDGEFLOW_SINKS", jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, "EDGEFLOW_SINKS")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	newest, ids, revisions, events := map[string]windowRow{}, map[string]int{}, 0, 0
	for n := uint64(0); n < info.State.Msgs; n++ {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		id := m.Headers().Get(jetstream.MsgIDHeader)
		ids[id]++
		if m.Subject() == "edgeflow.sink.updates.events" {
			var e struct {
				ID, Device, Stream string
				Seq                int64
			}
			if err := json.Unmarshal(m.Data(), &e); err != nil || e.ID != id || id != fmt.Sprintf("%s/%s/%d", e.Device, e.Stream, e.Seq) {
				t.Errorf("event message %s (id %s): %v", m.Data(), id, err)
			}
			events++
			continue
		}
		var body struct {
			Group                   map[string]string `json:"group_key"`
			Start                   time.Time         `json:"start_time"`
			Count                   int64             `json:"count"`
			Sum, Min, Max, Avg, P50 float64
			Final                   bool  `json:"final"`
			Revision                int64 `json:"revision"`
			Late                    int64 `json:"late"`
		}
		if err := json.Unmarshal(m.Data(), &body); err != nil {
			t.Fatal(err)
		}
		if body.Revision > 0 {
			revisions++
		}
		k := body.Group["device"] + "|" + body.Start.UTC().Format(time.RFC3339)
		w := windowRow{Count: body.Count, Sum: body.Sum, Min: body.Min, Max: body.Max, Avg: body.Avg, P50: body.P50,
			Final: body.Final, Revision: body.Revision, Late: body.Late}
		if old, ok := newest[k]; !ok || w.Revision >= old.Revision {
			newest[k] = w
		}
	}
	return newest, ids, revisions, events
}
