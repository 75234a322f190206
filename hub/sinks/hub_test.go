package sinks_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/jackc/pgx/v5"

	"edgeflow/aggregate"
	"edgeflow/hub"
	"edgeflow/hub/hubapi"
	"edgeflow/hub/internal/hubtest"
	"edgeflow/hub/sinks"
	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// testDevice publishes batches to a hub's embedded broker and waits for
// their acks.
type testDevice struct {
	t      testing.TB
	id     string
	stream wire.StreamID
	c      paho.Client
	mu     sync.Mutex
	acks   map[uint64]wirepb.AckStatus
	next   uint64 // next sequence number
}

func newTestDevice(t testing.TB, broker, id string, stream wire.StreamID, next uint64) *testDevice {
	t.Helper()
	d := &testDevice{t: t, id: id, stream: stream, acks: map[uint64]wirepb.AckStatus{}, next: next}
	o := paho.NewClientOptions().AddBroker("tcp://" + broker).SetClientID(fmt.Sprintf("dev-%s-%d", id, time.Now().UnixNano())).
		SetCleanSession(true).SetOrderMatters(false).SetConnectTimeout(5 * time.Second)
	d.c = paho.NewClient(o)
	if tok := d.c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("device %s connect: %v", id, tok.Error())
	}
	tok := d.c.Subscribe(wire.AckTopic(id), 1, func(_ paho.Client, m paho.Message) {
		if a, err := wire.DecodeAck(m.Payload(), wire.Limits{}); err == nil {
			d.mu.Lock()
			d.acks[a.FirstSeq] = a.Status
			d.mu.Unlock()
		}
	})
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	t.Cleanup(func() { d.c.Disconnect(100) })
	return d
}

// send publishes events at the given event times (metric temp) and waits
// for the hub's ack; it returns how many events the hub accepted.
func (d *testDevice) send(times []time.Time) int {
	d.t.Helper()
	b := &wirepb.Batch{DeviceId: d.id, StreamId: d.stream[:], FirstSeq: d.next, SendTimeNs: time.Now().UnixNano(),
		Clock: &wirepb.ClockEstimate{Method: wirepb.TimeMethod_TIME_METHOD_NTP}}
	for i, ts := range times {
		seq := d.next + uint64(i)
		b.Events = append(b.Events, &wirepb.Event{Metric: "temp", Value: float64((seq*7)%101) - 20, DeviceTimeNs: ts.UnixNano(),
			Tags: []*wirepb.Tag{{Key: "room", Value: fmt.Sprint("r", seq%3)}}, MonoNs: int64(seq), BootId: "b",
			Method: wirepb.TimeMethod_TIME_METHOD_NTP})
	}
	first := d.next
	d.next += uint64(len(times))
	if tok := d.c.Publish(wire.BatchTopic(d.id), 1, false, hubtest.EncodeBatch(d.t, b)); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		d.t.Fatalf("publish: %v", tok.Error())
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		d.mu.Lock()
		st, ok := d.acks[first]
		d.mu.Unlock()
		if ok {
			if st != wirepb.AckStatus_ACK_STATUS_OK {
				d.t.Fatalf("device %s batch %d: ack %v", d.id, first, st)
			}
			return len(times)
		}
		time.Sleep(5 * time.Millisecond)
	}
	d.t.Fatalf("device %s: no ack for batch %d", d.id, first)
	return 0
}

// sinkHub is the hub under test: aggregate engine with tumbling 1m
// windows, a windows sink and an events sink in schema.
type sinkHub struct {
	dir, schema, app string
	srv              *hub.Server
}

// sinkTestOptions is the hub the sink tests run on dir: an engine of
// 1-second lateness that evicts nothing, a 50 ms tick, and the sinks sk.
func sinkTestOptions(t testing.TB, dir string, sk ...sinks.Config) hub.Options {
	return hub.Options{DataDir: dir, HTTPAddr: "127.0.0.1:0", MQTTListen: "127.0.0.1:0", Logger: hubtest.QuietLogger(t),
		CheckpointInterval: time.Hour, RetentionInterval: time.Hour, TickInterval: 50 * time.Millisecond,
		Aggregate: &aggregate.Options{IdleTimeout: time.Hour, AllowedLateness: time.Second, WatermarkInterval: time.Nanosecond,
			EvictAfter: time.Hour},
		Sinks: sk}
}

// startSinkTestHub starts a hub with o; the test's end stops it.
func startSinkTestHub(t testing.TB, o hub.Options) *hub.Server {
	t.Helper()
	srv, err := hub.New(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	return srv
}

func (h *sinkHub) options(t *testing.T) hub.Options {
	dsn := testDSN + "&application_name=" + h.app
	return sinkTestOptions(t, h.dir,
		sinks.Config{Name: "windows", Kind: sinks.KindPostgresWindows, DSN: dsn, Table: h.schema + ".edgeflow_windows",
			Metrics: []string{"temp"}, Windows: []string{"tumbling:1m"}, GroupBy: []string{"device"}, Quantiles: []string{"p50"},
			BatchEntries: 3, PollInterval: 10 * time.Millisecond, MaxBackoff: 200 * time.Millisecond},
		sinks.Config{Name: "events", Kind: sinks.KindPostgresEvents, DSN: dsn, Table: h.schema + ".edgeflow_events",
			BatchEntries: 2, PollInterval: 10 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
}

func (h *sinkHub) start(t *testing.T) {
	t.Helper()
	h.srv = startSinkTestHub(t, h.options(t))
}

func (h *sinkHub) stop(t *testing.T) {
	t.Helper()
	if err := h.srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// cut terminates the sinks' PostgreSQL connections.
func cut(t *testing.T, conn *pgx.Conn, app string) int {
	t.Helper()
	var n int
	err := conn.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// waitCaughtUp waits until the engine holds every accepted event (the hub
// acknowledges before it applies), then until every sink, in a step begun
// after that, has committed everything the hub applied.
func waitCaughtUp(t *testing.T, srv *hub.Server, base time.Time, accepted int) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		res, err := srv.Engine().Query(aggregate.Query{Metric: "temp", Window: aggregate.WindowSpec{Kind: aggregate.Tumbling, Size: time.Hour},
			From: base.Add(-time.Hour), To: base.Add(time.Hour), Aggs: aggregate.AggCount})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, r := range res {
			n += int(r.Count)
		}
		if n == accepted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the engine holds %d events, %d were accepted", n, accepted)
		}
	}
	applied := time.Now()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		done := true
		for _, st := range srv.SinkStatuses() {
			done = done && st.Connected && st.Lag == 0 && st.Position > 0 && st.CheckedAt.After(applied)
		}
		if done {
			for _, st := range srv.SinkStatuses() {
				if st.LagBytes != 0 || st.LagSeconds != 0 {
					t.Errorf("sink %s caught up (0 entries behind) with lag %d bytes, %v s", st.Name, st.LagBytes, st.LagSeconds)
				}
			}
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("sinks did not catch up: %+v", srv.SinkStatuses())
}

// windowRow is a window as both the table and the API give it.
type windowRow struct {
	Count                   int64
	Sum, Min, Max, Avg, P50 float64
	Final                   bool
	Revision                int64
	Late                    int64
}

func TestHubSinksExactlyOnceAcrossRestartsAndCuts(t *testing.T) {
	conn, schema := pgSchema(t)
	h := &sinkHub{dir: t.TempDir(), schema: schema, app: "edgeflow_sinktest_" + schema}
	h.start(t)
	base := time.Now().Add(-3 * time.Hour).Truncate(time.Hour)
	streams := []wire.StreamID{wire.NewStreamID(), wire.NewStreamID()}
	devs := []*testDevice{newTestDevice(t, h.srv.BrokerAddr(), "d1", streams[0], 1), newTestDevice(t, h.srv.BrokerAddr(), "d2", streams[1], 1)}
	accepted, cuts := 0, 0
	// Phase 1: 8 minutes of event time, 2 s apart, batches of 12, the
	// sinks' connections cut twice on the way.
	at := func(i int) time.Time { return base.Add(time.Duration(i) * 2 * time.Second) }
	for i := 0; i < 240; i += 12 {
		for _, d := range devs {
			var ts []time.Time
			for k := i; k < i+12; k++ {
				ts = append(ts, at(k))
			}
			accepted += d.send(ts)
		}
		if i == 60 || i == 156 {
			cuts += cut(t, conn, h.app)
		}
	}
	// Stop at once: the sinks are behind, and resume after the restart.
	h.stop(t)
	next := []uint64{devs[0].next, devs[1].next}

	// Phase 2: the same data directory; late events revise final
	// windows; the connections are cut again; more events move the
	// watermark.
	h.start(t)
	devs = []*testDevice{newTestDevice(t, h.srv.BrokerAddr(), "d1", streams[0], next[0]), newTestDevice(t, h.srv.BrokerAddr(), "d2", streams[1], next[1])}
	accepted += devs[0].send([]time.Time{at(3), at(4), at(40)}) // minutes 0 and 1: final, revised
	cuts += cut(t, conn, h.app)
	for i := 240; i < 300; i += 12 {
		for _, d := range devs {
			var ts []time.Time
			for k := i; k < i+12; k++ {
				ts = append(ts, at(k))
			}
			accepted += d.send(ts)
		}
	}
	accepted += devs[1].send([]time.Time{at(100)}) // one more revision, after the cut
	waitCaughtUp(t, h.srv, base, accepted)

	table := readTable(t, conn, schema)
	api := readAPI(t, h.srv.HTTPAddr(), base.Add(-time.Hour), base.Add(time.Hour))
	if len(table) == 0 {
		t.Fatal("the windows table is empty")
	}
	for k, w := range api {
		got, ok := table[k]
		if !ok {
			t.Errorf("window %s: in /v1/aggregates (final), missing from the table", k)
			continue
		}
		if got != w {
			t.Errorf("window %s: table %+v, API %+v", k, got, w)
		}
	}
	for k := range table {
		if _, ok := api[k]; !ok {
			t.Errorf("window %s: in the table, not a final window of /v1/aggregates", k)
		}
	}
	revised := 0
	for _, w := range table {
		if w.Revision > 0 {
			revised++
		}
	}
	t.Logf("%d windows in the table (%d revised), %d events, %d connections cut, sinks: %+v", len(table), revised, accepted, cuts, h.srv.SinkStatuses())
	if cuts == 0 {
		t.Error("no sink connection was cut")
	}
	if revised < 2 {
		t.Errorf("%d revised windows in the table, want at least 2 (late events were sent)", revised)
	}

	var n, distinct int
	if err := conn.QueryRow(context.Background(), fmt.Sprintf(`SELECT count(*), count(DISTINCT (device, stream, seq)) FROM %s.edgeflow_events`, schema)).Scan(&n, &distinct); err != nil {
		t.Fatal(err)
	}
	if n != accepted || distinct != accepted {
		t.Errorf("events table: %d rows, %d distinct; %d events accepted", n, distinct, accepted)
	}
	var positions int
	if err := conn.QueryRow(context.Background(), fmt.Sprintf(`SELECT count(*) FROM %s.edgeflow_sink_positions WHERE position > 0`, schema)).Scan(&positions); err != nil || positions != 2 {
		t.Errorf("positions rows: %d (%v)", positions, err)
	}
}

func readTable(t *testing.T, conn *pgx.Conn, schema string) map[string]windowRow {
	t.Helper()
	return readTableWindow(t, conn, schema, "tumbling:1m")
}

func readTableWindow(t *testing.T, conn *pgx.Conn, schema, window string) map[string]windowRow {
	t.Helper()
	rows, err := conn.Query(context.Background(), fmt.Sprintf(`SELECT group_key->>'device', start_time, count, sum, min, max, avg, p50, final, revision, late
		FROM %s.edgeflow_windows WHERE metric = 'temp' AND "window" = $1`, schema), window)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]windowRow{}
	var (
		dev   string
		start time.Time
		w     windowRow
	)
	_, err = pgx.ForEachRow(rows, []any{&dev, &start, &w.Count, &w.Sum, &w.Min, &w.Max, &w.Avg, &w.P50, &w.Final, &w.Revision, &w.Late}, func() error {
		k := dev + "|" + start.UTC().Format(time.RFC3339)
		if _, dup := out[k]; dup {
			t.Errorf("duplicate row %s", k)
		}
		out[k] = w
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// readAPI returns the final windows /v1/aggregates answers.
func readAPI(t *testing.T, addr string, from, to time.Time) map[string]windowRow {
	t.Helper()
	return readAPIWindow(t, addr, "tumbling:1m", from, to)
}

func readAPIWindow(t *testing.T, addr, window string, from, to time.Time) map[string]windowRow {
	t.Helper()
	q := url.Values{"metric": {"temp"}, "window": {window}, "group_by": {"device"}, "aggs": {"count,sum,min,max,avg,p50"},
		"from": {from.UTC().Format(time.RFC3339)}, "to": {to.UTC().Format(time.RFC3339)}}
	resp, err := http.Get("http://" + addr + "/v1/aggregates?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r hubapi.AggregatesResponse
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || resp.StatusCode != 200 {
		t.Fatalf("aggregates: %d %v", resp.StatusCode, err)
	}
	out := map[string]windowRow{}
	f := func(p *float64) float64 {
		if p == nil {
			return 0
		}
		return *p
	}
	for _, w := range r.Windows {
		if !w.Final {
			continue
		}
		start, _ := time.Parse(time.RFC3339Nano, w.Start)
		out[w.Group["device"]+"|"+start.UTC().Format(time.RFC3339)] = windowRow{Count: int64(w.Count), Sum: f(w.Sum), Min: f(w.Min),
			Max: f(w.Max), Avg: f(w.Avg), P50: f(w.P50), Final: w.Final, Revision: int64(w.Revision), Late: int64(w.Late)}
	}
	return out
}

func TestHubRefusesToStartOnTableMismatch(t *testing.T) {
	conn, schema := pgSchema(t)
	if _, err := conn.Exec(context.Background(), fmt.Sprintf(`CREATE TABLE %s.edgeflow_events (device text, stream text, seq text, PRIMARY KEY (device, stream, seq))`, schema)); err != nil {
		t.Fatal(err)
	}
	h := &sinkHub{dir: t.TempDir(), schema: schema, app: "edgeflow_sinktest_" + schema}
	srv, err := hub.New(h.options(t))
	if err != nil {
		t.Fatal(err)
	}
	err = srv.Start(context.Background())
	_ = srv.Shutdown(context.Background())
	if !errors.Is(err, sinks.ErrSchemaMismatch) || !strings.Contains(err.Error(), "column seq is text, want bigint") {
		t.Fatalf("Start: %v, want a mismatch naming column seq", err)
	}
}

// TestSinksReplayOverExistingRows: a positions row older than the rows
// (restored from a backup, here deleted) makes the sinks write rows that
// are already there: nothing is doubled and the tables still match.
func TestSinksReplayOverExistingRows(t *testing.T) {
	conn, schema := pgSchema(t)
	h := &sinkHub{dir: t.TempDir(), schema: schema, app: "edgeflow_sinktest_" + schema}
	h.start(t)
	base := time.Now().Add(-3 * time.Hour).Truncate(time.Hour)
	d := newTestDevice(t, h.srv.BrokerAddr(), "d1", wire.NewStreamID(), 1)
	accepted := 0
	for i := 0; i < 200; i += 20 {
		var ts []time.Time
		for k := i; k < i+20; k++ {
			ts = append(ts, base.Add(time.Duration(k)*2*time.Second))
		}
		accepted += d.send(ts)
	}
	waitCaughtUp(t, h.srv, base, accepted)
	before := readTable(t, conn, schema)
	h.stop(t)
	if _, err := conn.Exec(context.Background(), fmt.Sprintf("DELETE FROM %s.edgeflow_sink_positions", schema)); err != nil {
		t.Fatal(err)
	}
	h.start(t)
	waitCaughtUp(t, h.srv, base, accepted)
	var n, distinct int
	if err := conn.QueryRow(context.Background(), fmt.Sprintf(`SELECT count(*), count(DISTINCT (device, stream, seq)) FROM %s.edgeflow_events`, schema)).Scan(&n, &distinct); err != nil {
		t.Fatal(err)
	}
	if n != accepted || distinct != accepted {
		t.Errorf("events table: %d rows, %d distinct; %d events accepted", n, distinct, accepted)
	}
	after := readTable(t, conn, schema)
	if len(after) != len(before) || len(after) == 0 {
		t.Errorf("windows: %d rows before, %d after", len(before), len(after))
	}
	api := readAPI(t, h.srv.HTTPAddr(), base.Add(-time.Hour), base.Add(time.Hour))
	for k, w := range api {
		if after[k] != w {
			t.Errorf("window %s: table %+v, API %+v", k, after[k], w)
		}
	}
}

// TestSessionWindowsSink writes session windows to a postgres_windows
// table while late events merge two final sessions into one and extend a
// third backwards (its start moves), with a hub restart half way: the rows
// under the old starts are deleted with the new ones written, and the
// table equals the API's final sessions, row for row.
func TestSessionWindowsSink(t *testing.T) {
	conn, schema := pgSchema(t)
	dir := t.TempDir()
	start := func() *hub.Server {
		o := sinkTestOptions(t, dir, sinks.Config{Name: "sessions", Kind: sinks.KindPostgresWindows, DSN: testDSN, Table: schema + ".edgeflow_windows",
			Metrics: []string{"temp"}, Windows: []string{"tumbling:1m", "session:30s"}, GroupBy: []string{"device"}, Quantiles: []string{"p50"},
			BatchEntries: 2, PollInterval: 10 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
		o.Aggregate.MaxSessionSpan = 10 * time.Minute
		return startSinkTestHub(t, o)
	}
	srv := start()
	base := time.Now().Add(-3 * time.Hour).Truncate(time.Hour)
	secs := func(s ...int) []time.Time {
		out := make([]time.Time, len(s))
		for i, v := range s {
			out[i] = base.Add(time.Duration(v) * time.Second)
		}
		return out
	}
	devs := []*testDevice{newTestDevice(t, srv.BrokerAddr(), "s1", wire.NewStreamID(), 1), newTestDevice(t, srv.BrokerAddr(), "s2", wire.NewStreamID(), 1)}
	accepted := 0
	// Sessions (gap 30 s) at 0..50, 120..170, 300..350, then events far
	// ahead so that they turn final.
	for _, d := range devs {
		accepted += d.send(secs(0, 10, 20, 30, 40, 50))
		accepted += d.send(secs(120, 130, 140, 150, 160, 170))
		accepted += d.send(secs(300, 310, 320, 330, 340, 350))
		accepted += d.send(secs(600, 610, 900, 1200))
	}
	waitCaughtUp(t, srv, base, accepted)
	before := readTableWindow(t, conn, schema, "session:30s")
	for _, k := range []string{"s1|" + base.Add(120*time.Second).UTC().Format(time.RFC3339), "s1|" + base.Add(300*time.Second).UTC().Format(time.RFC3339)} {
		if _, ok := before[k]; !ok {
			t.Fatalf("session %s not in the table before the late events: %v", k, before)
		}
	}
	// Late: 75 and 100 join the sessions at 0 and 120 into one; 290
	// moves the start of the session at 300. Device s2 gets none. The hub
	// stops at once after the first (the sink may not have written it)
	// and the second comes after the restart.
	accepted += devs[0].send(secs(75, 100))
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	stream, next := devs[0].stream, devs[0].next
	srv = start()
	d := newTestDevice(t, srv.BrokerAddr(), "s1", stream, next)
	accepted += d.send(secs(290))
	waitCaughtUp(t, srv, base, accepted)

	table := readTableWindow(t, conn, schema, "session:30s")
	api := readAPIWindow(t, srv.HTTPAddr(), "session:30s", base.Add(-time.Hour), base.Add(time.Hour))
	for k, w := range api {
		if got, ok := table[k]; !ok {
			t.Errorf("session %s: final in /v1/aggregates, missing from the table", k)
		} else if got != w {
			t.Errorf("session %s: table %+v, API %+v", k, got, w)
		}
	}
	for k := range table {
		if _, ok := api[k]; !ok {
			t.Errorf("session %s: in the table, not a final session of /v1/aggregates", k)
		}
	}
	merged := api["s1|"+base.UTC().Format(time.RFC3339)]
	if merged.Count != 14 {
		t.Errorf("the merged session of s1 at 0 s holds %d events, want 14 (6 + 2 late + 6)", merged.Count)
	}
	if _, ok := api["s1|"+base.Add(290*time.Second).UTC().Format(time.RFC3339)]; !ok {
		t.Errorf("no session of s1 starting at 290 s: %v", api)
	}
	t.Logf("%d sessions before the late events, %d after; table %d rows", len(before), len(api), len(table))
}
