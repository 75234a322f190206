package sinks_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"edgeflow/aggregate"
	"edgeflow/hub"
	"edgeflow/hub/internal/hubtest"
	"edgeflow/hub/sinks"
	"edgeflow/internal/testbroker"
	"edgeflow/internal/testnats"
	"edgeflow/wire"
)

// Sizes of the benchmarks' log: benchDevices devices, each benchBatches
// batches of benchBatchEvents events, one event a second of event time.
const (
	benchDevices     = 20
	benchBatches     = 10
	benchBatchEvents = 100
)

// fillLog ingests the benchmark's events into a hub on dir (no sinks)
// and stops it; it returns the events and the start of their event time.
func fillLog(b *testing.B, dir string) (int, time.Time) {
	b.Helper()
	o := benchOptions(b, dir, nil)
	srv, err := hub.New(o)
	if err != nil {
		b.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	base := time.Now().Add(-6 * time.Hour).Truncate(time.Hour)
	n := 0
	for d := 0; d < benchDevices; d++ {
		dev := newTestDevice(b, srv.BrokerAddr(), fmt.Sprint("bench-", d), wire.NewStreamID(), 1)
		for k := 0; k < benchBatches; k++ {
			ts := make([]time.Time, benchBatchEvents)
			for i := range ts {
				ts[i] = base.Add(time.Duration(k*benchBatchEvents+i) * time.Second)
			}
			n += dev.send(ts)
		}
	}
	if err := srv.Shutdown(context.Background()); err != nil {
		b.Fatal(err)
	}
	return n, base
}

func benchOptions(b testing.TB, dir string, sk []sinks.Config) hub.Options {
	return hub.Options{DataDir: dir, HTTPAddr: "127.0.0.1:0", MQTTListen: "127.0.0.1:0", Logger: hubtest.QuietLogger(b),
		CheckpointInterval: time.Hour, RetentionInterval: time.Hour,
		Aggregate: &aggregate.Options{IdleTimeout: time.Hour, AllowedLateness: time.Second, WatermarkInterval: time.Nanosecond, EvictAfter: time.Hour},
		Sinks:     sk}
}

// catchUp starts a hub on dir with sink and measures the sink catching up
// on the log, from the end of the hub's start (its recovery is not the
// sink's) until it committed everything: it returns the rows the sink
// wrote in that time and the time.
func catchUp(b *testing.B, dir string, sink sinks.Config) (int, time.Duration) {
	b.Helper()
	srv, err := hub.New(benchOptions(b, dir, []sinks.Config{sink}))
	if err != nil {
		b.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	start, before := time.Now(), srv.SinkStatuses()[0].RowsWritten
	for deadline := time.Now().Add(5 * time.Minute); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		st := srv.SinkStatuses()[0]
		if st.Lag == 0 && st.Position > 0 && st.CheckedAt.After(start) {
			return int(st.RowsWritten - before), time.Since(start)
		}
	}
	b.Fatalf("sink did not catch up: %+v", srv.SinkStatuses())
	return 0, 0
}

func countRows(b *testing.B, conn *pgx.Conn, table string) int {
	var n int
	if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		b.Fatal(err)
	}
	return n
}

// BenchmarkEventsSink is the events sink catching up on a hub's log
// (start to caught up: log read, event correction, COPY and merge),
// against a plain pgx COPY of rows of the same shape into a table of the
// same schema.
func BenchmarkEventsSink(b *testing.B) {
	conn, schema := pgSchema(b)
	dir := b.TempDir()
	events, base := fillLog(b, dir)
	run := 0 // every run gets fresh tables and sink names (-count reruns the sub-benchmarks)
	b.Run("sink", func(b *testing.B) {
		var total time.Duration
		written := 0
		for i := 0; i < b.N; i++ {
			run++
			table := fmt.Sprintf("%s.ev%d", schema, run)
			n, d := catchUp(b, dir, sinks.Config{Name: fmt.Sprint("ev", run), Kind: sinks.KindPostgresEvents, DSN: testDSN, Table: table})
			written, total = written+n, total+d
			if n := countRows(b, conn, table); n != events {
				b.Fatalf("%d rows, %d events", n, events)
			}
		}
		b.ReportMetric(float64(written)/total.Seconds(), "rows/s")
	})
	b.Run("plain_copy", func(b *testing.B) {
		var total time.Duration
		for i := 0; i < b.N; i++ {
			run++
			table := fmt.Sprintf("cp%d", run)
			if err := sinks.EnsureEventsTable(context.Background(), conn, schema+"."+table); err != nil {
				b.Fatal(err)
			}
			rows := make([][]any, 0, events)
			for d := 0; d < benchDevices; d++ {
				for s := 0; s < benchBatches*benchBatchEvents; s++ {
					ts := base.Add(time.Duration(s) * time.Second)
					rows = append(rows, []any{fmt.Sprint("bench-", d), "0123456789abcdef0123456789abcdef", int64(s + 1), "temp",
						float64(s%101) - 20, map[string]string{"room": "r1"}, ts, "NTP", int64(0), ts, time.Now(), int64(s)})
				}
			}
			start := time.Now()
			if _, err := conn.CopyFrom(context.Background(), pgx.Identifier{schema, table}, []string{"device", "stream", "seq", "metric", "value",
				"tags", "event_time", "time_method", "uncertainty_ns", "device_time", "server_time", "log_position"}, pgx.CopyFromRows(rows)); err != nil {
				b.Fatal(err)
			}
			total += time.Since(start)
		}
		b.ReportMetric(float64(events*b.N)/total.Seconds(), "rows/s")
	})
}

// BenchmarkWindowsSink is the windows sink catching up on a hub's log:
// one row per device and minute (tumbling:1m, group_by device).
func BenchmarkWindowsSink(b *testing.B) { benchWindows(b, "tumbling:1m") }

// BenchmarkSessionWindowsSink is the same with session windows (gap 2m,
// provisional: one session per device, not final at the log's end, its
// row replaced as it grows): each step queries the sessions starting up
// to aggregate.max_session_span (24h here) before its events.
func BenchmarkSessionWindowsSink(b *testing.B) { benchWindows(b, "session:2m") }

func benchWindows(b *testing.B, window string) {
	conn, schema := pgSchema(b)
	dir := b.TempDir()
	fillLog(b, dir)
	b.ResetTimer()
	var total time.Duration
	written, rows := 0, 0
	for i := 0; i < b.N; i++ {
		table := fmt.Sprintf("%s.win%d", schema, i)
		n, d := catchUp(b, dir, sinks.Config{Name: fmt.Sprint("win", i), Kind: sinks.KindPostgresWindows, DSN: testDSN, Table: table,
			Metrics: []string{"temp"}, Windows: []string{window}, GroupBy: []string{"device"}, Provisional: strings.HasPrefix(window, "session")})
		written, total = written+n, total+d
		rows += countRows(b, conn, table)
	}
	b.ReportMetric(float64(written)/total.Seconds(), "rows/s")
	b.ReportMetric(float64(rows)/float64(b.N), "rows/op")
	b.ReportMetric(total.Seconds()/float64(b.N), "s/catchup")
}

// BenchmarkMessageSinks is a message sink catching up on a hub's log with
// window updates (tumbling:1m by device) and every event (events: true):
// nats to a real nats-server (JetStream, file storage), mqtt to a real
// Mosquitto and to the embedded broker, QoS 1. msgs/s counts the messages
// the target acknowledged.
func BenchmarkMessageSinks(b *testing.B) {
	dir := b.TempDir()
	events, _ := fillLog(b, dir)
	nc := testnats.Start(b, 1)
	mosq := testbroker.StartMosquitto(b, testbroker.MosquittoOptions{})
	embedded, _ := testbroker.Embedded(b)
	run := 0
	for _, tc := range []struct {
		name string
		cfg  func(name string) sinks.Config
	}{
		{"nats", func(name string) sinks.Config {
			return sinks.Config{Kind: sinks.KindNATS, URL: nc.URLs(), Stream: "BENCH_" + name}
		}},
		{"mqtt_mosquitto", func(string) sinks.Config { return sinks.Config{Kind: sinks.KindMQTT, URL: mosq.URL()} }},
		{"mqtt_embedded", func(string) sinks.Config { return sinks.Config{Kind: sinks.KindMQTT, URL: embedded} }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var total time.Duration
			written := 0
			for i := 0; i < b.N; i++ {
				run++
				c := tc.cfg(fmt.Sprint("msg", run))
				c.Name, c.Events = fmt.Sprint("msg", run), true
				c.Metrics, c.Windows, c.GroupBy = []string{"temp"}, []string{"tumbling:1m"}, []string{"device"}
				n, d := catchUp(b, dir, c)
				if n < events {
					b.Fatalf("%d messages acknowledged, %d events in the log", n, events)
				}
				written, total = written+n, total+d
			}
			b.ReportMetric(float64(written)/total.Seconds(), "msgs/s")
		})
	}
}
