package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/jackc/pgx/v5"

	"edgeflow/hub/hubapi"
	"edgeflow/internal/testbroker"
	"edgeflow/internal/testpg"
	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

const sinksTestDSN = testpg.DSN

// sinksSchema is a schema of the test's own (testpg.Schema).
func sinksSchema(t *testing.T) (*pgx.Conn, string) {
	t.Helper()
	return testpg.Schema(t, "e2e_sinks")
}

// sinkDevice publishes batches like an agent does: it republishes a
// batch until the hub acknowledges it, across hub restarts.
type sinkDevice struct {
	t      *testing.T
	id     string
	stream wire.StreamID
	c      paho.Client
	mu     sync.Mutex
	acks   map[uint64]bool
	next   uint64
}

func newSinkDevice(t *testing.T, brokerURL, id string) *sinkDevice {
	d := &sinkDevice{t: t, id: id, stream: wire.NewStreamID(), acks: map[uint64]bool{}, next: 1}
	o := paho.NewClientOptions().AddBroker(brokerURL).SetClientID("e2e-sink-" + id).SetCleanSession(true).
		SetAutoReconnect(true).SetConnectRetry(true).SetConnectRetryInterval(100 * time.Millisecond).
		SetMaxReconnectInterval(200 * time.Millisecond).SetOrderMatters(false)
	o.SetOnConnectHandler(func(c paho.Client) {
		c.Subscribe(wire.AckTopic(id), 1, func(_ paho.Client, m paho.Message) {
			if a, err := wire.DecodeAck(m.Payload(), wire.Limits{}); err == nil && (a.Status == wirepb.AckStatus_ACK_STATUS_OK || a.Status == wirepb.AckStatus_ACK_STATUS_DUPLICATE) {
				d.mu.Lock()
				d.acks[a.FirstSeq] = true
				d.mu.Unlock()
			}
		})
	})
	d.c = paho.NewClient(o)
	d.c.Connect().WaitTimeout(10 * time.Second)
	t.Cleanup(func() { d.c.Disconnect(100) })
	return d
}

// send sends events at times (metric temp) until acknowledged; it returns
// how many events the batch holds.
func (d *sinkDevice) send(times []time.Time) int {
	values := make([]float64, len(times))
	for i := range times {
		values[i] = float64(((d.next+uint64(i))*7)%101) - 20
	}
	return d.sendValues(times, values)
}

// sendValues sends events at times with values (metric temp) until
// acknowledged; it returns how many events the batch holds.
func (d *sinkDevice) sendValues(times []time.Time, values []float64) int {
	b := &wirepb.Batch{DeviceId: d.id, StreamId: d.stream[:], FirstSeq: d.next, SendTimeNs: time.Now().UnixNano(),
		Clock: &wirepb.ClockEstimate{Method: wirepb.TimeMethod_TIME_METHOD_NTP}}
	for i, ts := range times {
		seq := d.next + uint64(i)
		b.Events = append(b.Events, &wirepb.Event{Metric: "temp", Value: values[i], DeviceTimeNs: ts.UnixNano(),
			MonoNs: int64(seq), BootId: "b", Method: wirepb.TimeMethod_TIME_METHOD_NTP})
	}
	payload, err := wire.EncodeBatch(b)
	if err != nil {
		d.t.Fatal(err)
	}
	first := d.next
	d.next += uint64(len(times))
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		d.c.Publish(wire.BatchTopic(d.id), 1, false, payload).WaitTimeout(time.Second)
		for wait := time.Now().Add(time.Second); time.Now().Before(wait); time.Sleep(10 * time.Millisecond) {
			d.mu.Lock()
			ok := d.acks[first]
			d.mu.Unlock()
			if ok {
				return len(times)
			}
		}
	}
	d.t.Fatalf("device %s: batch %d not acknowledged within 60s", d.id, first)
	return 0
}

// TestSinksSurviveSIGKILLAndConnectionCuts runs hubd with a windows and an
// events sink, and an mqtt sink (window updates and events) to a real
// Mosquitto, kills it with SIGKILL mid-run (twice), cuts the sinks'
// database connections, sends late events that revise final windows, and
// checks that the window table equals /v1/aggregates row for row, that
// the events table holds every accepted event once, and that an MQTT
// consumer subscribed throughout, after dropping duplicates by id, holds
// the same final windows and every accepted event.
func TestSinksSurviveSIGKILLAndConnectionCuts(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode: kills real processes")
	}
	conn, schema := sinksSchema(t)
	mosq := testbroker.StartMosquitto(t, testbroker.MosquittoOptions{})
	cons := newDedupConsumer(t, mosq.URL(), "e2e/updates")
	app := "edgeflow_e2e_" + schema
	dsn := sinksTestDSN + "&application_name=" + app
	cfg := fmt.Sprintf(`aggregate:
  enabled: true
  allowed_lateness: 1s
  idle_timeout: 1h
sinks:
  - name: windows
    kind: postgres_windows
    dsn: %[1]s
    table: %[2]s.edgeflow_windows
    metrics: [temp]
    windows: [tumbling:1m]
    group_by: [device]
    batch_entries: 4
    poll_interval: 20ms
    max_backoff: 300ms
  - name: events
    kind: postgres_events
    dsn: %[1]s
    table: %[2]s.edgeflow_events
    batch_entries: 2
    poll_interval: 20ms
    max_backoff: 300ms
  - name: updates
    kind: mqtt
    url: %[3]s
    topic: e2e/updates
    events: true
    metrics: [temp]
    windows: [tumbling:1m]
    group_by: [device]
    batch_entries: 3
    poll_interval: 20ms
    max_backoff: 300ms
`, dsn, schema, mosq.URL())
	h := startHubWithConfig(t, cfg)

	devs := []*sinkDevice{newSinkDevice(t, h.brokerURL, "s1"), newSinkDevice(t, h.brokerURL, "s2")}
	base := time.Now().Add(-3 * time.Hour).Truncate(time.Hour)
	at := func(i int) time.Time { return base.Add(time.Duration(i) * 2 * time.Second) }
	accepted, cuts := 0, 0
	for i := 0; i < 300; i += 10 {
		for _, d := range devs {
			var ts []time.Time
			for k := i; k < i+10; k++ {
				ts = append(ts, at(k))
			}
			accepted += d.send(ts)
		}
		switch i {
		case 80, 200:
			h.kill() // SIGKILL: no final checkpoint, sinks mid-transaction
			h.start()
		case 140:
			cuts += cutSinks(t, conn, app)
		case 250:
			// Late events for final windows: revisions.
			accepted += devs[0].send([]time.Time{at(2), at(35)})
			cuts += cutSinks(t, conn, app)
		}
	}
	h.kill()
	h.start()
	accepted += devs[1].send([]time.Time{at(70)}) // a revision after the last restart
	waitSinksCaughtUp(t, h.httpAddr, base, accepted)

	table := sinkTable(t, conn, schema)
	api := finalWindows(t, h.httpAddr, base.Add(-time.Hour), base.Add(time.Hour))
	if len(api) == 0 {
		t.Fatal("no final windows")
	}
	for k, w := range api {
		if got, ok := table[k]; !ok {
			t.Errorf("window %s: final in /v1/aggregates, missing from the table", k)
		} else if got != w {
			t.Errorf("window %s: table %+v, API %+v", k, got, w)
		}
	}
	revised := 0
	for k, w := range table {
		if _, ok := api[k]; !ok {
			t.Errorf("window %s: in the table, not a final window of /v1/aggregates", k)
		}
		if w.Revision > 0 {
			revised++
		}
	}
	var n, distinct int
	if err := conn.QueryRow(context.Background(), fmt.Sprintf(`SELECT count(*), count(DISTINCT (device, stream, seq)) FROM %s.edgeflow_events`, schema)).Scan(&n, &distinct); err != nil {
		t.Fatal(err)
	}
	if n != accepted || distinct != accepted {
		t.Errorf("events table: %d rows, %d distinct; %d events accepted", n, distinct, accepted)
	}
	if revised < 2 || cuts == 0 {
		t.Errorf("%d revised windows (want >= 2), %d connections cut (want > 0)", revised, cuts)
	}
	t.Logf("%d windows (%d revised), %d events, %d connections cut, 3 SIGKILLs", len(table), revised, accepted, cuts)

	// The mqtt sink: its last step's messages may still be on their way
	// to the consumer.
	for deadline := time.Now().Add(30 * time.Second); cons.distinctEvents() < accepted && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	cons.mu.Lock()
	defer cons.mu.Unlock()
	for k, w := range api {
		if got, ok := cons.newest[k]; !ok {
			t.Errorf("mqtt: window %s: final in /v1/aggregates, never received", k)
		} else if got != w {
			t.Errorf("mqtt: window %s: newest update %+v, API %+v", k, got, w)
		}
	}
	for k := range cons.newest {
		if _, ok := api[k]; !ok {
			t.Errorf("mqtt: window %s: received, not a final window of /v1/aggregates", k)
		}
	}
	if len(cons.events) != accepted || cons.bad > 0 {
		t.Errorf("mqtt: %d distinct events received (%d unreadable messages), %d accepted", len(cons.events), cons.bad, accepted)
	}
	dups := 0
	for _, n := range cons.ids {
		dups += n - 1
	}
	t.Logf("mqtt consumer: %d message ids, %d duplicates dropped", len(cons.ids), dups)
}

// dedupConsumer subscribes to an mqtt sink's topics and keeps, after
// dropping duplicates by id, the newest update of each window and the set
// of events.
type dedupConsumer struct {
	mu     sync.Mutex
	ids    map[string]int
	newest map[string]sinkWindow
	events map[string]bool
	bad    int
}

func newDedupConsumer(t *testing.T, brokerURL, topic string) *dedupConsumer {
	c := &dedupConsumer{ids: map[string]int{}, newest: map[string]sinkWindow{}, events: map[string]bool{}}
	cl := paho.NewClient(paho.NewClientOptions().AddBroker(brokerURL).SetClientID("e2e-consumer").SetCleanSession(true))
	if tok := cl.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("consumer: %v", tok.Error())
	}
	t.Cleanup(func() { cl.Disconnect(100) })
	tok := cl.Subscribe(topic+"/#", 1, func(_ paho.Client, m paho.Message) {
		var body struct {
			ID                 string            `json:"id"`
			Group              map[string]string `json:"group_key"`
			Start              time.Time         `json:"start_time"`
			Count              int64             `json:"count"`
			Sum, Min, Max, Avg float64
			Final              bool  `json:"final"`
			Revision           int64 `json:"revision"`
			Late               int64 `json:"late"`
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if err := json.Unmarshal(m.Payload(), &body); err != nil || body.ID == "" {
			c.bad++
			return
		}
		if c.ids[body.ID]++; c.ids[body.ID] > 1 {
			return
		}
		if m.Topic() == topic+"/events" {
			c.events[body.ID] = true
			return
		}
		k := body.Group["device"] + "|" + body.Start.UTC().Format(time.RFC3339)
		w := sinkWindow{Count: body.Count, Sum: body.Sum, Min: body.Min, Max: body.Max, Avg: body.Avg, Final: body.Final,
			Revision: body.Revision, Late: body.Late}
		if old, ok := c.newest[k]; !ok || w.Revision >= old.Revision {
			c.newest[k] = w
		}
	})
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("consumer subscribe: %v", tok.Error())
	}
	return c
}

func (c *dedupConsumer) distinctEvents() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.events)
}

func cutSinks(t *testing.T, conn *pgx.Conn, app string) int {
	var n int
	if err := conn.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// waitSinksCaughtUp waits until the engine holds every accepted event
// (the hub acknowledges before it applies), then polls GET /v1/sinks until
// every sink, in a step begun after that, is connected with no lag.
func waitSinksCaughtUp(t *testing.T, httpAddr string, base time.Time, accepted int) {
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		n := 0
		for _, w := range queryWindows(t, httpAddr, base.Add(-time.Hour), base.Add(time.Hour)) {
			n += int(w.Count)
		}
		if n == accepted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the engine holds %d events, %d were accepted", n, accepted)
		}
	}
	applied := time.Now()
	var last []byte
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get("http://" + httpAddr + "/v1/sinks")
		if err != nil {
			continue
		}
		var v struct {
			Sinks []struct {
				Connected bool      `json:"connected"`
				Lag       uint64    `json:"lag_entries"`
				Position  uint64    `json:"position"`
				CheckedAt time.Time `json:"checked_at"`
			} `json:"sinks"`
		}
		err = json.NewDecoder(resp.Body).Decode(&v)
		resp.Body.Close()
		last, _ = json.Marshal(v)
		ok := err == nil && len(v.Sinks) == 3
		for _, s := range v.Sinks {
			ok = ok && s.Connected && s.Lag == 0 && s.Position > 0 && s.CheckedAt.After(applied)
		}
		if ok {
			return
		}
	}
	t.Fatalf("sinks did not catch up: %s", last)
}

type sinkWindow struct {
	Count              int64
	Sum, Min, Max, Avg float64
	Final              bool
	Revision, Late     int64
}

func sinkTable(t *testing.T, conn *pgx.Conn, schema string) map[string]sinkWindow {
	rows, err := conn.Query(context.Background(), fmt.Sprintf(`SELECT group_key->>'device', start_time, count, sum, min, max, avg, final, revision, late
		FROM %s.edgeflow_windows`, schema))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]sinkWindow{}
	var (
		dev   string
		start time.Time
		w     sinkWindow
	)
	if _, err := pgx.ForEachRow(rows, []any{&dev, &start, &w.Count, &w.Sum, &w.Min, &w.Max, &w.Avg, &w.Final, &w.Revision, &w.Late}, func() error {
		out[dev+"|"+start.UTC().Format(time.RFC3339)] = w
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// queryWindows returns every window of /v1/aggregates, final or not.
func queryWindows(t *testing.T, httpAddr string, from, to time.Time) []hubapi.WindowJSON {
	q := url.Values{"metric": {"temp"}, "window": {"tumbling:1m"}, "group_by": {"device"}, "aggs": {"count,sum,min,max,avg"},
		"from": {from.UTC().Format(time.RFC3339)}, "to": {to.UTC().Format(time.RFC3339)}}
	resp, err := http.Get("http://" + httpAddr + "/v1/aggregates?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r hubapi.AggregatesResponse
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || resp.StatusCode != 200 {
		t.Fatalf("aggregates: %d %v", resp.StatusCode, err)
	}
	return r.Windows
}

func finalWindows(t *testing.T, httpAddr string, from, to time.Time) map[string]sinkWindow {
	f := func(p *float64) float64 {
		if p == nil {
			return 0
		}
		return *p
	}
	out := map[string]sinkWindow{}
	for _, w := range queryWindows(t, httpAddr, from, to) {
		if w.Final {
			start, _ := time.Parse(time.RFC3339Nano, w.Start)
			out[w.Group["device"]+"|"+start.UTC().Format(time.RFC3339)] = sinkWindow{Count: int64(w.Count), Sum: f(w.Sum), Min: f(w.Min),
				Max: f(w.Max), Avg: f(w.Avg), Final: true, Revision: int64(w.Revision), Late: int64(w.Late)}
		}
	}
	return out
}
