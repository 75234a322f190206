package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"

	"edgeflow/buffer"
	"edgeflow/hub"
	"edgeflow/internal/cputime"
	"edgeflow/internal/testbroker"
	"edgeflow/uplink"
	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// The delivery benchmarks: 4 agents (publishers), batches of 1000 events of
// about 40 bytes, 32 batches in flight per agent, QoS 1, one Mosquitto on
// loopback, once with each codec (zstd, s2 and the columns, the default),
// then the columns through hubd's embedded broker instead of Mosquitto.
// b.N is events per agent.
//
//	go test ./e2e -run '^$' -bench BenchmarkEndToEnd -benchtime 500000x -count 6
//
// BenchmarkEndToEnd reports, measured in the same run on the same broker one
// after the other: the broker's pass-through of the same frames
// (passthrough-events/s), its request/reply rate for them
// (reply-events/s), the end-to-end rate (events/s) and its ratio to each
// (pct-of-passthrough, pct-of-reply); how many cores the Go process (agents
// and hub) and Mosquitto kept busy during the end-to-end part and the Go
// process's CPU per event; the agents' mean ack latency (ack-ms) with its
// way back (back-ms: the hub's ack stamp to the agent's send loop) and the
// hub's share (hub-ms: a batch's arrival to its ack handed to the broker);
// the hub's mean group commit (time and batches) and the batches one ack
// message answered (batches/ack, range_acks); and the whole machine's
// busy cores and CPU per event (/proc/stat: every CPU's time neither idle,
// waiting for I/O nor stolen) during the end-to-end part and during the
// pass-through (machine-cores, machine-cpu-ns/event, pt-machine-cores,
// pt-machine-cpu-ns/event). When both parts keep the machine about as busy,
// the ratio of their CPU per event is the ratio of their rates. The machine
// is shared: compare runs with -count and look at the cores and latencies
// before reading much into one figure.
//
// E2E_WINDOW sets the window (default 32) and E2E_MOSQUITTO_NAGLE=1 leaves
// Mosquitto's set_tcp_nodelay off, its default, to measure what they cost;
// E2E_HUB_NOSYNC=1 runs the hub without its fsync per group commit (never
// how a hub runs: it measures what the fsync costs the round trip), and
// E2E_GROUP_COMMIT_WAIT sets hubd's group-commit-wait (a duration; 0 turns
// it off; default hubd's 2ms), and E2E_BUFFER_COMPRESSION the agents'
// buffer.BlockCompression (default the edge agent's: columns under the
// columnar codec, whose uplink then sends stored blocks as they are, s2
// under the others; s2 with the columns makes the uplink encode each batch).
const (
	benchAgents      = 4
	benchBatchEvents = 1000
)

// benchWindow is the batches in flight per publisher (E2E_WINDOW).
var benchWindow = func() int {
	if n, err := strconv.Atoi(os.Getenv("E2E_WINDOW")); err == nil && n > 0 {
		return n
	}
	return 32
}()

// benchGroupCommitWait is E2E_GROUP_COMMIT_WAIT as hub.Options takes it.
func benchGroupCommitWait(b *testing.B) time.Duration {
	v := os.Getenv("E2E_GROUP_COMMIT_WAIT")
	if v == "" {
		return 0 // the hub's default
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		b.Fatalf("E2E_GROUP_COMMIT_WAIT=%q: want a duration such as 2ms, or 0", v)
	}
	if d == 0 {
		return hub.NoGroupCommitWait
	}
	return d
}

// benchBlockCompression is E2E_BUFFER_COMPRESSION, the agents' buffer
// block format (columns, s2 or none), by default the edge agent's for the
// codec (uplink.BufferBlocks).
func benchBlockCompression(codec wire.Codec) buffer.BlockCompression {
	if v := os.Getenv("E2E_BUFFER_COMPRESSION"); v != "" {
		return buffer.BlockCompression(v)
	}
	return uplink.BufferBlocks(codec.String())
}

// benchRecords returns n encoded events of about 40 bytes, shaped like one
// sensor's readings: a metric from a small set, one tag, a noisy value with
// two decimals (8 bytes of mantissa that compress poorly), device and
// monotonic clocks about 10 ms apart with jitter.
func benchRecords(n int, seed uint64, now time.Time) [][]byte {
	rng := rand.New(rand.NewPCG(seed, 40))
	metrics := []string{"temp", "rh", "co2", "pm25"}
	out := make([][]byte, n)
	v, t, mono := 20.0, now.UnixNano(), int64(3600e9)
	for i := range out {
		v += rng.NormFloat64() * 0.3
		d := 10e6 + rng.Int64N(1e5)
		t, mono = t+d, mono+d
		out[i], _ = proto.Marshal(&wirepb.Event{Metric: metrics[i%len(metrics)], Value: math.Round(v*100) / 100,
			Tags: []*wirepb.Tag{{Key: "rm", Value: "b2"}}, DeviceTimeNs: t, MonoNs: mono,
			Method: wirepb.TimeMethod_TIME_METHOD_NTP})
	}
	return out
}

// benchFrame is the batch frame an uplink would send for recs as the first
// batch of a stream.
func benchFrame(device string, codec wire.Codec, recs [][]byte) []byte {
	id := wire.NewStreamID()
	hdr := &wirepb.Batch{DeviceId: device, StreamId: id[:], FirstSeq: 1, SendTimeNs: time.Now().UnixNano(),
		Backlog: &wirepb.Backlog{Events: 1 << 20, Bytes: 40 << 20, OldestNs: time.Now().UnixNano()}}
	body, _ := wire.AppendRawEvents(hdr, recs)
	return wire.FrameWith(wire.MsgBatch, codec, body)
}

// BenchmarkEndToEnd measures events/s from agents' buffers to the hub's
// write-ahead log (fsynced, acknowledged back to the agents) through a real
// Mosquitto, and the broker's pass-through of the same frames in the same
// run. b.N is events per agent.
func BenchmarkEndToEnd(b *testing.B) {
	for _, codec := range []wire.Codec{wire.CodecZstd, wire.CodecS2, wire.CodecColumns} {
		b.Run(codec.String(), func(b *testing.B) { endToEnd(b, codec, false) })
	}
	// hubd's default: its embedded broker, with the pass-through and
	// request/reply measured through that broker too.
	b.Run("embedded/columns", func(b *testing.B) { endToEnd(b, wire.CodecColumns, true) })
}

func endToEnd(b *testing.B, codec wire.Codec, embedded bool) {
	var brokerURL string
	brokerPID := 0 // the embedded broker's CPU is the Go process's
	if !embedded {
		mosq := testbroker.StartMosquitto(b, testbroker.MosquittoOptions{Nagle: os.Getenv("E2E_MOSQUITTO_NAGLE") == "1"})
		brokerURL, brokerPID = mosq.URL(), childPID("mosquitto")
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	n := max(b.N, benchBatchEvents) / benchBatchEvents * benchBatchEvents
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	store, err := buffer.Open(b.TempDir(), buffer.Options{Logger: quiet, BlockCompression: benchBlockCompression(codec)})
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	var streams []*buffer.Stream
	frames := make([][]byte, benchAgents)
	for i := range benchAgents {
		recs := benchRecords(benchBatchEvents, uint64(i), time.Now())
		st, err := store.Stream(fmt.Sprintf("bench-%d", i), buffer.StreamOptions{MaxBytes: 1 << 30})
		if err != nil {
			b.Fatal(err)
		}
		for appended := 0; appended < n; appended += benchBatchEvents {
			if _, err := st.Append(ctx, recs); err != nil {
				b.Fatal(err)
			}
		}
		streams = append(streams, st)
		frames[i] = benchFrame(st.Name(), codec, recs)
	}
	reg := prometheus.NewRegistry()
	ho := hub.Options{DataDir: b.TempDir(), HTTPAddr: "off", MQTTURL: brokerURL, ClientID: "bench-hub", Logger: quiet, Registerer: reg,
		NoSync: os.Getenv("E2E_HUB_NOSYNC") == "1", GroupCommitWait: benchGroupCommitWait(b)}
	if embedded {
		ho.MQTTListen = "127.0.0.1:0"
	}
	srv, err := hub.New(ho)
	if err != nil {
		b.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	if embedded {
		brokerURL = "tcp://" + srv.BrokerAddr()
	}

	settleWrites()
	b.ResetTimer()
	ptr := passThrough(b, brokerURL, frames, n/benchBatchEvents, 0)
	pt := ptr.rate()
	rr := requestReply(b, brokerURL, frames, n/benchBatchEvents)

	um, _ := uplink.NewMetrics(nil)
	stopProfile := profileE2E(b)
	cpu0 := sampleCPU(brokerPID)
	start := time.Now()
	var wg sync.WaitGroup
	var backNs, backN atomic.Int64 // hub's ack stamp to the agent's send loop
	onAck := func(_ uint64, hubTimeNs int64) {
		backNs.Add(time.Now().UnixNano() - hubTimeNs)
		backN.Add(1)
	}
	for _, st := range streams {
		up, err := uplink.New(st, uplink.Options{DeviceID: st.Name(), Brokers: []string{brokerURL}, Logger: quiet,
			Window: benchWindow, MaxBatchEvents: benchBatchEvents, Linger: uplink.NoLinger, PollInterval: 5 * time.Millisecond, Metrics: um,
			Compression: codec.String(), OnAck: onAck})
		if err != nil {
			b.Fatal(err)
		}
		wg.Add(1)
		go func() { defer wg.Done(); _ = up.Run(ctx) }()
	}
	total := uint64(n * benchAgents)
	for {
		acked := uint64(0)
		for _, st := range streams {
			acked += st.Stats().Acked
		}
		if acked == total {
			break
		}
		time.Sleep(time.Millisecond)
	}
	elapsed := time.Since(start)
	cpu := sampleCPU(brokerPID).sub(cpu0)
	stopProfile()
	b.StopTimer()
	cancel()
	wg.Wait()
	e2e := float64(total) / elapsed.Seconds()
	b.ReportMetric(e2e, "events/s")
	b.ReportMetric(pt, "passthrough-events/s")
	b.ReportMetric(100*e2e/pt, "pct-of-passthrough")
	b.ReportMetric(rr, "reply-events/s")
	b.ReportMetric(100*e2e/rr, "pct-of-reply")
	b.ReportMetric(cpu.self.Seconds()/elapsed.Seconds(), "go-cores")
	b.ReportMetric(cpu.broker.Seconds()/elapsed.Seconds(), "broker-cores")
	b.ReportMetric(float64(cpu.self.Nanoseconds())/float64(total), "go-cpu-ns/event")
	reportMachine(b, "", cpu, elapsed, int(total))
	reportMachine(b, "pt-", ptr.cpu, ptr.elapsed, ptr.events)
	b.ReportMetric(float64(len(frames[0])), "B/frame")
	b.ReportMetric(1000*histMean(um.AckLatency), "ack-ms")
	if n := backN.Load(); n > 0 {
		b.ReportMetric(float64(backNs.Load())/float64(n)/1e6, "back-ms")
	}
	if mfs, err := reg.Gather(); err == nil {
		var batches, ackMsgs float64
		for _, mf := range mfs {
			switch mf.GetName() {
			case "edgeflow_hub_batches_total":
				batches = counterSum(mf)
			case "edgeflow_hub_ack_messages_total":
				ackMsgs = counterSum(mf)
			case "edgeflow_hub_wal_commit_seconds":
				b.ReportMetric(1000*histMean(metricFamily{mf}), "commit-ms")
			case "edgeflow_hub_wal_group_entries":
				b.ReportMetric(histMean(metricFamily{mf}), "batches/commit")
			case "edgeflow_hub_ack_seconds":
				b.ReportMetric(1000*histMean(metricFamily{mf}), "hub-ms")
			}
		}
		if ackMsgs > 0 {
			b.ReportMetric(batches/ackMsgs, "batches/ack")
		}
	}
	b.ReportMetric(0, "ns/op")
}

// profileE2E starts a CPU profile of the end-to-end part alone when
// E2E_CPUPROFILE names a file (go test's -cpuprofile would also cover the
// setup and the pass-through), and returns the function that stops it.
func profileE2E(b *testing.B) func() {
	path := os.Getenv("E2E_CPUPROFILE")
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }
}

// metricFamily is a gathered metric family, for histMean.
type metricFamily struct{ *dto.MetricFamily }

// counterSum is the sum of a gathered counter family's series.
func counterSum(mf *dto.MetricFamily) float64 {
	sum := 0.0
	for _, m := range mf.GetMetric() {
		sum += m.GetCounter().GetValue()
	}
	return sum
}

// histMean is the mean of the observations of a histogram: a Collector, or
// a gathered metricFamily.
func histMean(c any) float64 {
	var hs []*dto.Histogram
	switch c := c.(type) {
	case metricFamily:
		for _, m := range c.GetMetric() {
			hs = append(hs, m.GetHistogram())
		}
	case prometheus.Collector:
		ch := make(chan prometheus.Metric, 16)
		c.Collect(ch)
		close(ch)
		for m := range ch {
			var d dto.Metric
			if m.Write(&d) == nil {
				hs = append(hs, d.GetHistogram())
			}
		}
	}
	sum, n := 0.0, uint64(0)
	for _, h := range hs {
		sum, n = sum+h.GetSampleSum(), n+h.GetSampleCount()
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}

// BenchmarkBrokerPassThrough is the baseline alone: the frames of
// BenchmarkEndToEnd through Mosquitto with nothing else done to them, for
// each codec, with the CPU it takes.
func BenchmarkBrokerPassThrough(b *testing.B) {
	for _, codec := range []wire.Codec{wire.CodecZstd, wire.CodecS2, wire.CodecColumns} {
		b.Run(codec.String(), func(b *testing.B) { brokerPassThrough(b, codec) })
	}
}

func brokerPassThrough(b *testing.B, codec wire.Codec) {
	mosq := testbroker.StartMosquitto(b, testbroker.MosquittoOptions{})
	brokerPID := childPID("mosquitto")
	frames := make([][]byte, benchAgents)
	for i := range frames {
		frames[i] = benchFrame(fmt.Sprintf("bench-%d", i), codec, benchRecords(benchBatchEvents, uint64(i), time.Now()))
	}
	b.ResetTimer()
	r := passThrough(b, mosq.URL(), frames, max(b.N, benchBatchEvents)/benchBatchEvents, brokerPID)
	b.StopTimer()
	b.ReportMetric(r.rate(), "events/s")
	b.ReportMetric(r.cpu.self.Seconds()/r.elapsed.Seconds(), "go-cores")
	b.ReportMetric(r.cpu.broker.Seconds()/r.elapsed.Seconds(), "broker-cores")
	reportMachine(b, "", r.cpu, r.elapsed, r.events)
	b.ReportMetric(float64(len(frames[0])), "B/frame")
	b.ReportMetric(0, "ns/op")
}

// ptResult is what a pass-through sent, how long it took and the CPU used
// (by this process, the broker and the machine) over that interval.
type ptResult struct {
	events  int
	elapsed time.Duration
	cpu     cpuTimes
}

// rate is the pass-through's events/s.
func (r ptResult) rate() float64 { return float64(r.events) / r.elapsed.Seconds() }

// reportMachine reports the machine's busy cores and its CPU per event
// over a part of a benchmark that took elapsed for events (the metric
// names behind prefix), where /proc/stat could be read.
func reportMachine(b *testing.B, prefix string, cpu cpuTimes, elapsed time.Duration, events int) {
	if cpu.machine <= 0 {
		return
	}
	b.ReportMetric(cpu.machine.Seconds()/elapsed.Seconds(), prefix+"machine-cores")
	b.ReportMetric(float64(cpu.machine.Nanoseconds())/float64(events), prefix+"machine-cpu-ns/event")
}

// passThrough publishes batches copies of frames[i] from publisher i, each
// at QoS 1 with benchWindow publishes awaiting their PUBACK, to one
// subscriber that is set up as the hub's (QoS 1, persistent session,
// handlers unordered, manual acks) and reads every payload. It returns
// events/s from the publishers' first connect to the last message
// received, and the CPU used meanwhile (brokerPID's too, 0: none).
func passThrough(b *testing.B, url string, frames [][]byte, batches, brokerPID int) ptResult {
	var got atomic.Int64
	done := make(chan struct{})
	want := int64(batches * len(frames))
	sum, stop := benchSubscriber(b, url, "pt", func(mqtt.Client, mqtt.Message) {
		if got.Add(1) == want {
			close(done)
		}
	})
	defer stop()
	cpu0, start := sampleCPU(brokerPID), time.Now()
	for i, frame := range frames {
		go func() {
			pub := mqtt.NewClient(mqtt.NewClientOptions().AddBroker(url).SetClientID(fmt.Sprintf("pt-pub-%d", i)).
				SetCleanSession(false).SetOrderMatters(false))
			if t := pub.Connect(); !t.WaitTimeout(5*time.Second) || t.Error() != nil {
				return
			}
			defer pub.Disconnect(100)
			window := make(chan mqtt.Token, benchWindow)
			for range batches {
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
	elapsed, cpu := time.Since(start), sampleCPU(brokerPID).sub(cpu0)
	if sum.Load() != framesSum(frames, batches) {
		b.Fatalf("pass-through: payload bytes differ from what was sent")
	}
	return ptResult{events: int(want) * benchBatchEvents, elapsed: elapsed, cpu: cpu}
}

// benchSubscriber connects the subscriber of a baseline (prefix "pt" or
// "rr"), set up as the hub's (QoS 1, persistent session, handlers
// unordered, manual acks), to prefix/+/batch. Each message's bytes are
// summed into the returned counter before it is acknowledged and handed
// to then; stop disconnects it.
func benchSubscriber(b *testing.B, url, prefix string, then mqtt.MessageHandler) (sum *atomic.Uint64, stop func()) {
	sum = new(atomic.Uint64)
	sub := mqtt.NewClient(mqtt.NewClientOptions().AddBroker(url).SetClientID(prefix + "-sub").
		SetCleanSession(false).SetOrderMatters(false).SetAutoAckDisabled(true))
	if t := sub.Connect(); !t.WaitTimeout(5*time.Second) || t.Error() != nil {
		b.Fatalf("%s: subscriber connect failed", prefix)
	}
	if t := sub.Subscribe(prefix+"/+/batch", 1, func(c mqtt.Client, m mqtt.Message) {
		s := uint64(0)
		for _, x := range m.Payload() {
			s += uint64(x)
		}
		sum.Add(s)
		m.Ack()
		then(c, m)
	}); !t.WaitTimeout(5*time.Second) || t.Error() != nil {
		sub.Disconnect(100)
		b.Fatalf("%s: subscribe failed", prefix)
	}
	return sum, func() { sub.Disconnect(100) }
}

// framesSum is what benchSubscriber sums for batches copies of frames.
func framesSum(frames [][]byte, batches int) uint64 {
	sum := uint64(0)
	for _, f := range frames {
		for _, c := range f {
			sum += uint64(c) * uint64(batches)
		}
	}
	return sum
}

// requestReply is the broker's rate for the end-to-end path's shape with
// no work in it: publisher i publishes copies of frames[i] at QoS 1 with
// benchWindow awaiting a reply (not a PUBACK), and one subscriber, set up
// as the hub's, reads every payload and answers each with a 40-byte QoS 0
// message on the publisher's reply topic, as the hub acks. It returns
// events/s from the first publish to the last reply.
func requestReply(b *testing.B, url string, frames [][]byte, batches int) float64 {
	reply := make([]byte, 40)
	sum, stop := benchSubscriber(b, url, "rr", func(c mqtt.Client, m mqtt.Message) {
		c.Publish(strings.TrimSuffix(m.Topic(), "batch")+"ack", 0, false, reply)
	})
	defer stop()
	var wg sync.WaitGroup
	start := time.Now()
	for i, frame := range frames {
		window := make(chan struct{}, benchWindow)
		got := make(chan struct{}, batches)
		pub := mqtt.NewClient(mqtt.NewClientOptions().AddBroker(url).SetClientID(fmt.Sprintf("rr-pub-%d", i)).
			SetCleanSession(true).SetOrderMatters(false))
		if t := pub.Connect(); !t.WaitTimeout(5*time.Second) || t.Error() != nil {
			b.Fatal("request/reply: publisher connect failed")
		}
		defer pub.Disconnect(100)
		if t := pub.Subscribe(fmt.Sprintf("rr/%d/ack", i), 0, func(mqtt.Client, mqtt.Message) {
			<-window
			got <- struct{}{}
		}); !t.WaitTimeout(5*time.Second) || t.Error() != nil {
			b.Fatal("request/reply: reply subscribe failed")
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range batches {
				window <- struct{}{}
				pub.Publish(fmt.Sprintf("rr/%d/batch", i), 1, false, frame)
			}
			for range batches {
				select {
				case <-got:
				case <-time.After(time.Minute):
					b.Errorf("request/reply: publisher %d got no reply for a minute", i)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if sum.Load() != framesSum(frames, batches) {
		b.Fatalf("request/reply: payload bytes differ from what was sent")
	}
	return float64(batches*len(frames)*benchBatchEvents) / elapsed.Seconds()
}

// settleWrites waits until this process has stopped writing (Badger
// flushes and compacts what the setup appended for a second or two after
// the last Append returns), then flushes the page cache to disk, so that
// the timed part pays neither the setup's compactions nor its write-back
// competing with the hub's fsyncs.
func settleWrites() {
	last, quiet := int64(-1), 0
	for deadline := time.Now().Add(30 * time.Second); quiet < 4 && time.Now().Before(deadline); {
		w := writeBytes()
		if w == last {
			quiet++
		} else {
			quiet = 0
		}
		last = w
		time.Sleep(250 * time.Millisecond)
	}
	syscall.Sync()
}

// writeBytes is what this process has written to storage so far.
func writeBytes() int64 {
	raw, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "write_bytes: "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// cpuTimes is CPU time (user+system) used by this process and the broker,
// and by the whole machine (every CPU's time running something: neither
// idle, waiting for I/O nor stolen by the hypervisor).
type cpuTimes struct{ self, broker, machine time.Duration }

func (c cpuTimes) sub(d cpuTimes) cpuTimes {
	return cpuTimes{c.self - d.self, c.broker - d.broker, c.machine - d.machine}
}

// sampleCPU reads the CPU time used so far by this process, by process pid
// (0: none) and by the machine.
func sampleCPU(pid int) cpuTimes {
	c := cpuTimes{self: cputime.Self(), machine: machineBusy()}
	if f := procStat(pid); len(f) > 14 {
		ut, _ := strconv.ParseInt(f[13], 10, 64)
		st, _ := strconv.ParseInt(f[14], 10, 64)
		c.broker = time.Duration(ut+st) * (time.Second / 100) // USER_HZ is 100 on Linux
	}
	return c
}

// machineBusy is the CPU time all CPUs have spent running something since
// boot: user, nice, system, irq and softirq time, not idle, iowait or
// steal (0 where /proc/stat cannot be read).
func machineBusy() time.Duration {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal ...
	if len(f) < 9 || f[0] != "cpu" {
		return 0
	}
	var busy int64
	for i, v := range f[1:9] {
		if i == 3 || i == 4 || i == 7 { // idle, iowait, steal
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		busy += n
	}
	return time.Duration(busy) * (time.Second / 100) // USER_HZ
}

// procStat returns the fields of /proc/pid/stat, the command name as one.
func procStat(pid int) []string {
	if pid <= 0 {
		return nil
	}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	i, j := bytes.IndexByte(raw, '('), bytes.LastIndexByte(raw, ')')
	if i < 0 || j < i {
		return nil
	}
	return append([]string{string(raw[:i-1]), string(raw[i+1 : j])}, strings.Fields(string(raw[j+1:]))...)
}

// childPID finds the newest live child of this process named comm (the
// Mosquitto that testbroker just started), or 0.
func childPID(comm string) int {
	paths, _ := filepath.Glob("/proc/[0-9]*/stat")
	best, bestStart := 0, int64(-1)
	for _, p := range paths {
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		f := procStat(pid)
		if len(f) < 22 || f[1] != comm || f[2] == "Z" || f[3] != strconv.Itoa(os.Getpid()) {
			continue
		}
		if start, _ := strconv.ParseInt(f[21], 10, 64); start > bestStart {
			best, bestStart = pid, start
		}
	}
	return best
}
