package uplink

import (
	"testing"
	"time"
)

// BenchmarkUplinkThroughput measures events/s from a pre-filled buffer,
// in batches of 1000 events of about 40 bytes, through a real Mosquitto on
// loopback to the test responder (which decodes every batch with
// wire.DecodeBatch and answers it). One op is one event.
//
//	go test -run '^$' -bench BenchmarkUplinkThroughput -benchtime 1000000x ./uplink/
func BenchmarkUplinkThroughput(b *testing.B) {
	m := newMosquitto(b)
	_, st := openStream(b, "dev-bench")
	r := newResponder(b, m.URL(), nil)
	r.light = true
	appendEvents(b, st, b.N, 10_000)
	u := newUplink(b, st, m.URL(), func(o *Options) {
		o.MaxBatchEvents = 1000
		o.Window = 16
		o.AckTimeout = 30 * time.Second
		o.Logger = quietLogger()
	})
	want := uint64(b.N)
	b.ResetTimer()
	start := time.Now()
	stop := runUplink(b, u)
	for st.Stats().Acked < want {
		time.Sleep(200 * time.Microsecond)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	stop()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
	b.ReportMetric(value(u.m.BytesSent)/float64(b.N), "wire-B/event")
	b.ReportMetric(0, "ns/op")
}
