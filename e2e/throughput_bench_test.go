package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"google.golang.org/protobuf/proto"

	"edgeflow/buffer"
	"edgeflow/hub"
	"edgeflow/internal/testbroker"
	"edgeflow/uplink"
	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

const (
	benchAgents      = 4
	benchBatchEvents = 1000
)

// benchRecords returns n encoded events of about 40 bytes.
func benchRecords(n int, now time.Time) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i], _ = proto.Marshal(&wirepb.Event{Metric: "temp", Value: float64(i % 97),
			DeviceTimeNs: now.UnixNano() + int64(i)*1e6, Method: wirepb.TimeMethod_TIME_METHOD_NTP})
	}
	return out
}

// BenchmarkEndToEnd measures events/s from agents' buffers to the hub's
// write-ahead log (fsynced, acknowledged back to the agents) through a real
// Mosquitto, batches of 1000. b.N is events per agent.
func BenchmarkEndToEnd(b *testing.B) {
	mosq := testbroker.StartMosquitto(b, testbroker.MosquittoOptions{})
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := hub.New(hub.Options{DataDir: b.TempDir(), HTTPAddr: "off", MQTTURL: mosq.URL(), ClientID: "bench-hub", Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := srv.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	store, err := buffer.Open(b.TempDir(), buffer.Options{Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	n := max(b.N, benchBatchEvents)
	recs := benchRecords(benchBatchEvents, time.Now())
	var streams []*buffer.Stream
	for i := 0; i < benchAgents; i++ {
		st, _ := store.Stream(fmt.Sprintf("bench-%d", i), buffer.StreamOptions{MaxBytes: 1 << 30})
		for appended := 0; appended < n; appended += benchBatchEvents {
			if _, err := st.Append(ctx, recs); err != nil {
				b.Fatal(err)
			}
		}
		streams = append(streams, st)
	}
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for _, st := range streams {
		up, err := uplink.New(st, uplink.Options{DeviceID: st.Name(), Brokers: []string{mosq.URL()}, Logger: quiet,
			Window: 16, MaxBatchEvents: benchBatchEvents, Linger: uplink.NoLinger, PollInterval: 5 * time.Millisecond})
		if err != nil {
			b.Fatal(err)
		}
		wg.Add(1)
		go func() { defer wg.Done(); up.Run(ctx) }()
	}
	total := uint64(0)
	for _, st := range streams {
		total += st.Stats().Next - 1
	}
	for {
		acked := uint64(0)
		for _, st := range streams {
			acked += st.Stats().Acked
		}
		if acked == total {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	cancel()
	wg.Wait()
	b.ReportMetric(float64(total)/elapsed.Seconds(), "events/s")
}

// BenchmarkBrokerPassThrough is the baseline: the same batch frames (1000
// events each) published at QoS 1 by as many paho clients, with the same
// window in flight, to a subscriber on the same Mosquitto, with nothing else
// done to them. b.N is events per publisher.
func BenchmarkBrokerPassThrough(b *testing.B) {
	mosq := testbroker.StartMosquitto(b, testbroker.MosquittoOptions{})
	id := wire.NewStreamID()
	hdr := &wirepb.Batch{DeviceId: "x", StreamId: id[:], FirstSeq: 1, SendTimeNs: time.Now().UnixNano()}
	body, _ := wire.AppendRawEvents(hdr, benchRecords(benchBatchEvents, time.Now()))
	frame := wire.Frame(wire.MsgBatch, body)
	n := max(b.N, benchBatchEvents) / benchBatchEvents
	var got atomic.Int64
	done := make(chan struct{})
	want := int64(n * benchAgents)
	sub := mqtt.NewClient(mqtt.NewClientOptions().AddBroker(mosq.URL()).SetClientID("pt-sub").SetOrderMatters(false))
	if t := sub.Connect(); !t.WaitTimeout(5*time.Second) || t.Error() != nil {
		b.Fatal("subscriber connect failed")
	}
	defer sub.Disconnect(100)
	sub.Subscribe("pt/+/batch", 1, func(_ mqtt.Client, m mqtt.Message) {
		if got.Add(1) == want {
			close(done)
		}
	}).WaitTimeout(5 * time.Second)
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < benchAgents; i++ {
		go func() {
			pub := mqtt.NewClient(mqtt.NewClientOptions().AddBroker(mosq.URL()).SetClientID(fmt.Sprintf("pt-pub-%d", i)))
			if t := pub.Connect(); !t.WaitTimeout(5*time.Second) || t.Error() != nil {
				return
			}
			defer pub.Disconnect(100)
			window := make(chan mqtt.Token, 16)
			for k := 0; k < n; k++ {
				if len(window) == cap(window) {
					(<-window).WaitTimeout(10 * time.Second)
				}
				window <- pub.Publish(fmt.Sprintf("pt/%d/batch", i), 1, false, frame)
			}
			for len(window) > 0 {
				(<-window).WaitTimeout(10 * time.Second)
			}
		}()
	}
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		b.Fatalf("pass-through: %d of %d messages arrived", got.Load(), want)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(want*benchBatchEvents)/elapsed.Seconds(), "events/s")
}
