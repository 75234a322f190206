package hub

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"edgeflow/hub/broker"
	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// benchPayloads encodes n batches of size events for each of devices
// streams, with realistic (poorly compressible) values, framed with codec.
func benchPayloads(tb testing.TB, devices, n, size int, codec wire.Codec) [][]broker.Message {
	rng := rand.New(rand.NewPCG(7, 8))
	out := make([][]broker.Message, devices)
	for d := range out {
		id := fmt.Sprintf("bench-%d", d)
		sid := wire.NewStreamID()
		for i := 0; i < n; i++ {
			b := makeBatch(id, sid, uint64(i*size+1), size)
			for _, e := range b.Events {
				e.Value = rng.NormFloat64() * 100
				e.DeviceTimeNs += rng.Int64N(1e6)
				e.Tags = e.Tags[:1]
			}
			body, err := proto.Marshal(b)
			if err != nil {
				tb.Fatal(err)
			}
			out[d] = append(out[d], broker.Message{Topic: wire.BatchTopic(id), Payload: wire.FrameWith(wire.MsgBatch, codec, body)})
		}
	}
	return out
}

// BenchmarkIngest measures the hub's ingest path on real parts: decode,
// validate, dedup, WAL group commit with fsync, ack published through the
// embedded broker (counted by an inline subscriber), apply. Batches of
// 1000 events from 16 devices sending concurrently, as broker client
// goroutines do, in zstd frames and in columns. Reports events/s.
func BenchmarkIngest(b *testing.B) {
	for _, codec := range []wire.Codec{wire.CodecZstd, wire.CodecColumns} {
		for _, sync := range []bool{true, false} {
			b.Run(fmt.Sprintf("%v/fsync=%v", codec, sync), func(b *testing.B) { benchIngest(b, 16, 1000, !sync, codec) })
		}
	}
}

// BenchmarkIngestFleet is the fleet's shape instead: 2000 devices each
// sending batches of one event (a device reporting once a second with a
// short linger). It measures the hub's cost per batch; b.N is batches.
//
//	go test ./hub/ -run '^$' -bench BenchmarkIngestFleet -benchtime 40000x
func BenchmarkIngestFleet(b *testing.B) { benchIngest(b, 2000, 1, false, wire.CodecColumns) }

func benchIngest(b *testing.B, devices, size int, noSync bool, codec wire.Codec) {
	o := testOptions(b, b.TempDir())
	o.HTTPAddr, o.NoSync = HTTPOff, noSync
	var acks atomic.Int64
	done := make(chan struct{}, 1)
	perDevice := (b.N + devices - 1) / devices
	want := int64(perDevice * devices)
	s := startHubWith(b, o, func(s *Server) (broker.Transport, error) {
		tr, err := broker.NewSecureEmbeddedBroker(broker.EmbeddedOptions{Addr: s.opts.MQTTListen,
			MaxPacket: uint32(s.opts.Limits.MaxFrameBytes + 64<<10), Registerer: s.opts.Registerer, Logger: s.log})
		return &ackWatch{Transport: tr, ack: func(payload []byte) {
			if a, err := wire.DecodeAck(payload, wire.Limits{}); err != nil || a.Status != wirepb.AckStatus_ACK_STATUS_OK {
				b.Errorf("ack %v %v", a, err)
			}
			if acks.Add(1) == want {
				done <- struct{}{}
			}
		}}, err
	})
	payloads := benchPayloads(b, devices, perDevice, size, codec)
	bytes := 0
	for _, m := range payloads[0] {
		bytes += len(m.Payload)
	}
	b.SetBytes(int64(bytes / len(payloads[0])))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for d := range payloads {
		wg.Add(1)
		go func(ms []broker.Message) {
			defer wg.Done()
			for _, m := range ms {
				s.handle(m.Topic, m.Payload)
			}
		}(payloads[d])
	}
	wg.Wait()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		b.Fatalf("only %d of %d acks", acks.Load(), want)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(want)*float64(size)/elapsed.Seconds(), "events/s")
	b.ReportMetric(float64(want)/elapsed.Seconds(), "batches/s")
	_ = s.Shutdown(context.Background())
}

// ackWatch is the embedded broker's Transport that also hands each ack the
// hub publishes to ack, before the broker takes it.
type ackWatch struct {
	broker.Transport
	ack func(payload []byte)
}

// Publish hands the acks among msgs to w.ack, then publishes msgs.
func (w *ackWatch) Publish(msgs []broker.Message) error {
	for _, m := range msgs {
		if strings.HasSuffix(m.Topic, "/ack") {
			w.ack(m.Payload)
		}
	}
	return w.Transport.Publish(msgs)
}

// startHubWith starts a hub on the transport tr makes (from the hub's
// options with defaults) and shuts it down at cleanup.
func startHubWith(tb testing.TB, o Options, tr func(*Server) (broker.Transport, error)) *Server {
	tb.Helper()
	s, err := New(o)
	if err == nil {
		s.tr, err = tr(s)
	}
	if err == nil {
		err = s.Start(context.Background())
	}
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	return s
}
